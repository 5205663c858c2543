#include "protocol/reasons.h"

#include <string.h>

#define C REASON_CANDIDATE
#define T REASON_TASK
#define E REASON_ENV

/* In the order of docs/result.md's table. */
static const struct reason table[] = {
	{"ok", REASON_OK, false, "compiled, correct, or correct and timed"},
	{"candidate.missing", C, false, "no candidate of the format asked for"},
	{"build.error", C, false, "the compiler failed"},
	{"build.forbidden_source", C, false, "a source rule was broken"},
	{"build.forbidden_symbol", C, false, "a symbol or library outside the allowlist"},
	{"build.no_sources", C, false, "no CUDA code to build"},
	{"build.timeout", C, false, "the compiler ran past its time limit"},
	{"build.internal", E, false, "the build could not run"},
	{"task.invalid", T, false, "the task failed the loader's checks"},
	{"task.syntax_error", T, false, "model.py does not parse"},
	{"task.import_error", T, false, "model.py does not import"},
	{"task.no_model", T, false, "model.py defines no Model"},
	{"task.no_get_inputs", T, false, "model.py defines no get_inputs"},
	{"task.no_get_init_inputs", T, false, "model.py defines no get_init_inputs"},
	{"task.init_raised", T, false, "Model(...) raised"},
	{"task.inputs_raised", T, false, "get_inputs() raised"},
	{"task.forward_raised", T, false, "Model.forward raised"},
	{"task.bad_output", T, false, "the reference's outputs are not tensors we can compare"},
	{"task.bad_input", T, false, "an input we cannot hand to a kernel"},
	{"task.nondeterministic", T, false, "the reference differs from itself"},
	{"task.missing_file", T, false, "a file of the task is missing"},
	{"task.unsupported", T, false, "the task uses something we cannot run"},
	{"env.no_gpu", E, false, "no CUDA GPU here"},
	{"env.bridge", E, false, "the torch bridge cannot run"},
	{"env.no_worker", E, false, "the GPU worker or the runner cannot start"},
	{"env.sandbox", E, false, "the sandbox cannot start"},
	{"env.gpu", E, false, "the supervisor's GPU context failed"},
	{"env.gpu_memory", E, false, "the bridge could not allocate the slots"},
	{"env.install", E, false, "the installation is incomplete"},
	{"env.io", E, false, "files cannot be created or written"},
	{"env.deadline", E, false, "the service's request deadline passed"},
	{"env.worker_died", E, false, "the service's evaluation worker died twice"},
	{"candidate.load_failed", C, true, "the PyTorch-format file does not import"},
	{"candidate.init_failed", C, true, "ModelNew(...) raised"},
	{"candidate.params_mismatch", C, true, "the parameters do not line up with Model's"},
	{"hack.fallback", C, true, "a fallback KernelBench's checker forbids"},
	{"hack.torch_compute", C, true, "forward() ran torch compute"},
	{"abi.load_failed", C, true, "the library cannot be loaded"},
	{"abi.missing_forward", C, true, "the library lacks ca_forward"},
	{"abi.setup_failed", C, true, "ca_setup returned nonzero"},
	{"abi.forward_failed", C, true, "ca_forward returned nonzero"},
	{"verify.mismatch", C, true, "an output differs from the reference"},
	{"verify.input_modified", C, true, "the candidate wrote to an input"},
	{"verify.params_modified", C, true, "the candidate wrote to a parameter"},
	{"fault.illegal_address", C, true, "an illegal memory address"},
	{"fault.misaligned_address", C, true, "a misaligned memory address"},
	{"fault.illegal_instruction", C, true, "an illegal instruction"},
	{"fault.launch_failure", C, true, "a kernel launch failed"},
	{"fault.cuda_error", C, true, "a CUDA error"},
	{"fault.crash", C, true, "the candidate's process died"},
	{"fault.host_oom", C, true, "over the sandbox's memory limit"},
	{"fault.device_oom", C, true, "a CUDA allocation failed in the candidate's call"},
	{"fault.output_limit", C, true, "too much output on stdout and stderr"},
	{"timeout", C, false, "past the watchdog limit"},
	{"sandbox.violation", C, false, "a forbidden system call or a file left outside"},
	{"hack.inconsistent_output", C, true, "a checked timed call was wrong"},
	{"hack.final_mismatch", C, true, "the final checked call was wrong"},
	{"hack.timer_tampering", C, true, "claimed times far below the supervisor's clock"},
	{"hack.harness_tampering", C, true, "the process broke its protocol or reached the harness"},
	{"hack.background_work", C, true, "GPU work still running long after the call"},
	{"hack.stream_escape", C, true, "GPU work hidden from the harness stream"},
	{"hack.host_compute", C, true, "the work was done on the CPU"},
	{"worker.bad_plan", C, true, "the process could not run its plan"},
	{"worker.bad_input", C, true, "the process could not read its inputs"},
	{"worker.no_gpu", C, true, "the process found no GPU"},
	{"worker.oom", C, true, "the process ran out of memory"},
	{"worker.internal", C, true, "the process failed"},
	{"worker.unsupported", C, true, "the process cannot do what was asked"},
	{"profile.cupti_error", C, true, "CUPTI failed while profiling"},
	{"baseline.compile_failed", E, false, "torch.compile failed on the reference (a timing's error)"},
	{"internal", REASON_INTERNAL, false, "a bug or I/O failure in cuda-agent"},
};

#undef C
#undef T
#undef E

const struct reason *reason_table(size_t *count)
{
	*count = sizeof table / sizeof table[0];
	return table;
}

const struct reason *reason_find(const char *code)
{
	if (!code)
		return NULL;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].code, code) == 0)
			return &table[i];
	return NULL;
}

enum reason_class reason_class_of(const char *code)
{
	const struct reason *r;
	if (!code)
		return REASON_OK;
	r = reason_find(code);
	return r ? r->cls : REASON_INTERNAL;
}

bool reason_judged(const char *code)
{
	enum reason_class c = reason_class_of(code);
	return c == REASON_OK || c == REASON_CANDIDATE;
}

int reason_exit_code(const char *code)
{
	switch (reason_class_of(code)) {
	case REASON_OK: return 0;
	case REASON_CANDIDATE: return 1;
	case REASON_TASK: return 3;
	case REASON_ENV: return 4;
	case REASON_INTERNAL: return 5;
	}
	return 5;
}

bool reason_candidate_may_report(const char *code)
{
	const struct reason *r = reason_find(code);
	return r && r->candidate_may_report;
}

const char *reason_class_name(enum reason_class c)
{
	switch (c) {
	case REASON_OK: return "ok";
	case REASON_CANDIDATE: return "candidate";
	case REASON_TASK: return "task";
	case REASON_ENV: return "env";
	case REASON_INTERNAL: return "internal";
	}
	return "internal";
}
