// Compiles, but exports no ca_forward (a C++-mangled name instead).
#include <cuda_agent/abi.h>

int forward_with_wrong_name(const DLTensor *args, int num_args)
{
	return num_args + (args ? 0 : 1);
}
