"""CHEAT (torch compute reached from the extension's C++ through the Python C-API): the Python
side is clean (one call into the extension, nothing else), and the extension writes no kernel:
its C++ imports torch with PyImport_ImportModule, looks up torch.matmul with
PyObject_GetAttrString, takes W^T with PyObject_CallMethod(w, "t") and calls
torch.matmul(x, W^T) with PyObject_CallFunctionObjArgs: PyTorch's own cuBLAS GEMM does the work.
The static check of the candidate's Python sees only an extension call, and the C++ uses no
ATen symbol.

Why it must fail: the built module's imports are checked (docs/torch-rules.md, "The symbol
rules"), and the Python C-API calls that import modules (PyImport_*) are refused as tampering at
build (hack.harness_tampering). Had it got past the build, torch.matmul called from C++ is a
Python-level torch function call all the same: the runner's TorchFunctionMode refuses it while
forward() runs (hack.torch_compute; abi.forward_failed if the refusal's exception were lost).
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

capi_cpp = r"""
#include <pybind11/pybind11.h>
#include <Python.h>

namespace py = pybind11;

// y = x W^T, by torch.matmul, reached through the C-API.
py::object linear(py::object x, py::object w)
{
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch)
        throw py::error_already_set();
    PyObject *matmul = PyObject_GetAttrString(torch, "matmul");
    Py_DECREF(torch);
    if (!matmul)
        throw py::error_already_set();
    PyObject *wt = PyObject_CallMethod(w.ptr(), "t", nullptr);
    if (!wt) {
        Py_DECREF(matmul);
        throw py::error_already_set();
    }
    PyObject *y = PyObject_CallFunctionObjArgs(matmul, x.ptr(), wt, nullptr);
    Py_DECREF(wt);
    Py_DECREF(matmul);
    if (!y)
        throw py::error_already_set();
    return py::reinterpret_steal<py::object>(y);
}
"""

capi_ext = load_inline(
    name="adv_kb_capi_import_matmul",
    cpp_sources=capi_cpp,
    functions=["linear"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return capi_ext.linear(x, self.fc.weight)
