/* wire: the names and caps of the candidate process's protocol (docs/protocol.md, "The
 * candidate's process: plan, commands, events"), in one place for the supervisor (src/eval/)
 * and the native worker (src/worker/); the PyTorch-format runner
 * (python/cuda_agent_bridge/runner/) speaks the same words.
 *
 * Commands are one JSON object per line on the process's stdin, {"cmd": name, ...}; events one
 * JSON object per line on the descriptor the process kept for them, {"event": name, ...}.
 * Exactly one event answers each command. */
#ifndef CA_PROTOCOL_WIRE_H
#define CA_PROTOCOL_WIRE_H

#define WIRE_PLAN_VERSION 2

/* commands */
#define WIRE_CMD_EMPTY   "empty"   /* {"input": r}: events around an empty launch (calibration) */
#define WIRE_CMD_LOAD    "load"    /* load the candidate */
#define WIRE_CMD_SETUP   "setup"   /* ca_setup / load_state_dict from the params slot */
#define WIRE_CMD_CALL    "call"    /* {"input": r, "scalars": [[i, v], ...]} */
#define WIRE_CMD_AUDIT   "audit"   /* a call recorded by CUPTI, + "phase" */
#define WIRE_CMD_PROFILE "profile" /* {"input", "scalars", "calls": n}: a CUPTI kernel table */
#define WIRE_CMD_QUIT    "quit"    /* ca_teardown, then exit 0 */

/* events */
#define WIRE_EV_DEVICE  "device"  /* first, unasked: the process's view of the device */
#define WIRE_EV_LOADED  "loaded"
#define WIRE_EV_SET_UP  "set_up"
#define WIRE_EV_CALLED  "called"  /* {"ev_ms": x} */
#define WIRE_EV_AUDITED "audited"
#define WIRE_EV_PROFILE "profile"
#define WIRE_EV_FAILED  "failed"  /* {"code", "message"}: this command failed */
#define WIRE_EV_ERROR   "error"   /* {"code", "message"}: fatal, the process exits 1 */
#define WIRE_EV_DONE    "done"

#define WIRE_MAX_COMMAND (64u << 10) /* bytes of one command line */
#define WIRE_MAX_EVENT   (8u << 20)  /* bytes of one event line (profile tables) */
#define WIRE_MAX_SCALARS 4096        /* scalar arguments of one call */

#endif
