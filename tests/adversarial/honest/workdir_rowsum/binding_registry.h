// The fixed registration header of the CUDA-Agent workdir layout (written for cuda-agent).
//
// Every kernels/<name>_binding.cpp defines a function that adds its Python functions to a
// pybind11 module and registers it here with REGISTER_BINDING(tag, function); binding.cpp (the
// one PYBIND11_MODULE of the build) runs every registered function on the module
// `cuda_extension`. Registrations happen in static initializers, before the module's init
// function runs, so the order of the translation units does not matter.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

namespace cuda_extension_registry {

using Binder = std::function<void(pybind11::module &)>;

// A function-local static: constructed on first use, so registrations from other translation
// units' static initializers never see it unconstructed.
inline std::vector<Binder> &binders()
{
	static std::vector<Binder> all;
	return all;
}

struct Registrar {
	explicit Registrar(Binder b) { binders().push_back(std::move(b)); }
};

inline void bind_all(pybind11::module &m)
{
	for (const Binder &b : binders())
		b(m);
}

} // namespace cuda_extension_registry

// REGISTER_BINDING(tag, fn): fn is a void(pybind11::module &); tag names the registration (one
// identifier per registration in the build).
#define REGISTER_BINDING(tag, fn)                                                             \
	static cuda_extension_registry::Registrar cuda_extension_registrar_##tag{               \
		[](pybind11::module &m) { fn(m); }}
