// The fixed module definition of the CUDA-Agent workdir layout: the Python module
// `cuda_extension` holds every function that kernels/*_binding.cpp registered.
#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m)
{
	m.doc() = "kernels of this workdir (registered by kernels/*_binding.cpp)";
	cuda_extension_registry::bind_all(m);
}
