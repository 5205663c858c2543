"""docs/torch-rules.md, "Each rule: the attack it stops, the idiom it allows": for every class of
static rule, an attack that must be refused with its reason code and an honest idiom that must
pass the static check, under both rules profiles (issue 46: the rules refuse what reaches the
harness, not the candidate's own objects). The idioms are the ones honest public KernelBench
kernels use (the corpus of bench/kernelbench_public), written as whole candidate files.

A rule's id here is the first column of the docs table; test_docs_table_names_every_rule keeps
the two in step."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from cuda_agent_bridge import static_check as sc

T, C, F = sc.TAMPERING, sc.COMPUTE, sc.FALLBACK
DOC = Path(__file__).resolve().parents[2] / "docs" / "torch-rules.md"
HEAD = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "from torch.utils.cpp_extension import load_inline\n")  # lines 1-4 of every snippet

EXT = '''
ext = load_inline(name="ext", cpp_sources="torch::Tensor fused(torch::Tensor x);",
                  cuda_sources="", functions=["fused", "relu", "sum"])
'''


@dataclass(frozen=True)
class Rule:
    rule: str  # the docs table's first column
    attack: str
    code: str  # the attack's reason code (refused under every profile for T, cuda-agent for C,
    #            kernelbench for F)
    text: str  # in the attack's first finding
    idiom: str  # must pass under both profiles


def src(*parts: str) -> bytes:
    return (HEAD + "".join(textwrap.dedent(p) for p in parts)).encode()


RULES: list[Rule] = [
    Rule("imports", """
        import ctypes
        class ModelNew(nn.Module):
            def forward(self, x):
                return x
        """, T, "import of ctypes", """
        import math
        import functools
        import os
        from typing import Optional, List
        from dataclasses import dataclass
        import numpy as np
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        @dataclass
        class Config:
            block: int = 256
        @functools.lru_cache(maxsize=None)
        def blocks(n: int) -> int:
            return math.ceil(n / Config().block)
        class ModelNew(nn.Module):
            def forward(self, x: torch.Tensor, mask: Optional[List[int]] = None):
                n = int(np.prod(x.shape))
                return ext.fused(x) if blocks(n) else x
        """),
    Rule("module_names", """
        import random
        class ModelNew(nn.Module):
            def forward(self, x):
                random._os.system("id")
                return x
        """, T, "random._os.system", """
        import os
        import time
        import functools
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
                self.here = os.path.dirname(os.path.abspath(__file__))
                self.t0 = time.perf_counter()
            def forward(self, x):
                return ext.fused(x)
        """),
    Rule("reexported_modules", """
        class ModelNew(nn.Module):
            def forward(self, x):
                m = torch.sys.modules
                return x
        """, T, "torch.sys is not allowed", """
        from torch.nn.modules.utils import _pair
        cpp_ext = torch.utils.cpp_extension
        class ModelNew(nn.Module):
            def __init__(self, k=3):
                super().__init__()
                self.k = _pair(k)
                self.ext = cpp_ext.load_inline(name="e", cpp_sources="", functions=["fused"])
            def forward(self, x):
                return self.ext.fused(x)
        """),
    Rule("torch_private", """
        class ModelNew(nn.Module):
            def forward(self, x):
                with torch._C.DisableTorchFunction():
                    return torch.relu(x)
        """, T, "torch._C is not allowed", """
        import math
        class ModelNew(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.weight = nn.Parameter(torch.empty(n, n))
                self.bias = nn.Parameter(torch.empty(n))
                self.reset_parameters()
            def reset_parameters(self):
                nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
                nn.init.uniform_(self.bias, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
            def forward(self, x):
                return ext.fused(x)
        """),
    Rule("torch_denied", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.cu = torch.jit.CompilationUnit("def f(x):\\n    return x.relu()\\n")
            def forward(self, x):
                return self.cu.f(x)
        """, T, "torch.jit is not allowed", """
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        class ModelNew(nn.Module):
            def forward(self, x):
                if torch.cuda.is_available():
                    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
                    major, _ = torch.cuda.get_device_capability()
                out = ext.fused(x)
                torch.cuda.synchronize()
                return out
        """),
    Rule("deferred_compute", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.g = torch.cuda.CUDAGraph()
            def forward(self, x):
                self.g.replay()
                return x
        """, C, "CUDA graph capture", """
        class ModelNew(nn.Module):
            @torch.no_grad()
            def forward(self, x):
                with torch.inference_mode():
                    return ext.fused(x)
        """),
    Rule("dunder_attrs", """
        class ModelNew(nn.Module):
            def forward(self, x):
                subclasses = x.__class__.__mro__[-1].__subclasses__()
                return x
        """, T, "__subclasses__", """
        class ModelNew(nn.Module):
            def __init__(self, **kwargs):
                super().__init__()
                self.__dict__.update(kwargs)
                self.__dict__["alpha"] = 1.0
            def extra_repr(self):
                keys = sorted(k for k in self.__dict__ if not k.startswith("_"))
                own = ", ".join(f"{k}={self.__dict__[k]}" for k in keys)
                return f"{self.__class__.__name__}({own}) {type(self).__name__}"
            def forward(self, x):
                return ext.fused(x)
        """),
    Rule("reflection_names", """
        def frame():
            try:
                raise ValueError
            except ValueError as e:
                return e.__traceback__.tb_frame.f_back.f_globals
        class ModelNew(nn.Module):
            def forward(self, x):
                return x
        """, T, "__traceback__", """
        class ModelNew(nn.Module):
            def forward(self, x):
                stream = torch.cuda.current_stream().cuda_stream
                ptr = x.data_ptr()
                return ext.fused(x)
        """),
    Rule("dunder_names", """
        __name__ = "__main__"
        class ModelNew(nn.Module):
            def forward(self, x):
                return x
        """, T, "assigning __name__", """
        __all__ = ["ModelNew"]
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        if __name__ == "__main__":
            import sys
            print(torch.relu(torch.ones(2)), sys.argv)
        """),
    Rule("builtins", """
        class ModelNew(nn.Module):
            def forward(self, x):
                c = getattr(torch, "_" + "C")
                return x
        """, T, "getattr() with this name", """
        class ModelNew(nn.Module):
            def __init__(self, layers=2):
                super().__init__()
                for i in range(layers):
                    setattr(self, "scale", float(i))
                self.layer0 = nn.Identity()
            def forward(self, input):
                layer = getattr(self, f"layer{0}")
                bias = getattr(self, "bias", None)
                if hasattr(self, "scale") and isinstance(input, torch.Tensor):
                    print(len(input.shape), bias)
                return ext.fused(input)
        """),
    Rule("monkeypatching", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ev = torch.cuda.Event
                self.ev.elapsed_time = lambda start, end: 0.001
            def forward(self, x):
                return x
        """, T, "setting self.ev.elapsed_time", """
        import os
        _ext = None
        def _load():
            global _ext
            if _ext is None:
                _ext = load_inline(name="g", cpp_sources="", functions=["relu"])
            return _ext
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                if not hasattr(Fn, "kernel"):
                    Fn.kernel = load_inline(name="k", cpp_sources="", functions=["sum"])
                ctx.save_for_backward(x)
                return Fn.kernel.sum(x)
        class ModelNew(nn.Module):
            _cached = None
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 3, 3)
                self.conv.weight.data = torch.zeros(3, 3, 3, 3)
                self.conv.weight.requires_grad = False
                for p in self.parameters():
                    p.requires_grad = False
                os.environ["MAX_JOBS"] = "2"
            @classmethod
            def _ext(cls):
                if cls._cached is None:
                    cls._cached = load_inline(name="c", cpp_sources="", functions=["relu"])
                return cls._cached
            def forward(self, x):
                if getattr(type(self), "_own", None) is None:
                    type(self)._own = load_inline(name="t", cpp_sources="", functions=["relu"])
                return Fn.apply(_load().relu(self._ext().relu(type(self)._own.relu(x))))
        ModelNew.shared = load_inline(name="s", cpp_sources="", functions=["relu"])
        """),
    Rule("unbound_methods", """
        class A(nn.Module):
            def patch(self):
                self.elapsed_time = None
        A.patch(torch.cuda.Event)
        """, T, "A.patch outside a call on its own instance", """
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                if ctx is not None:
                    ctx.save_for_backward(x)
                return ext.fused(x)
        class Base(nn.Module):
            def forward(self, x):
                return ext.fused(x)
        class ModelNew(Base):
            @staticmethod
            def _grid(n: int) -> int:
                return (n + 255) // 256
            @classmethod
            def _name(cls) -> str:
                return cls.__name__
            def forward(self, x):
                g = self._grid(x.numel()) + ModelNew._grid(4)
                y = Base.forward(self, x)
                return Fn.forward(None, y)
        """),
    Rule("modules_as_values", """
        def run(mod, x):
            return mod.relu(x)
        class ModelNew(nn.Module):
            def forward(self, x):
                return run(torch, x)
        """, T, "using the module torch as a value", """
        mm = torch.empty_like
        class Block(nn.Module):
            def __init__(self, c, act_layer=nn.GELU, dtype=torch.float32):
                super().__init__()
                self.act = act_layer()
                self.dtype = dtype
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block(4)
            def forward(self, x):
                out = mm(x)
                assert isinstance(x, (torch.Tensor, nn.Parameter)) and x.dtype == self.block.dtype
                return ext.fused(out)
        """),
    Rule("definitions", """
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        class ModelNew(nn.Module):
            def __new__(cls, *args):
                return Model()
            def forward(self, x):
                return x
        """, T, "defining __new__ in ModelNew", """
        from dataclasses import dataclass
        @dataclass
        class Launch:
            threads: int = 256
            def __post_init__(self):
                self.threads = max(32, self.threads)
        class Loader:
            _instance = None
            def __new__(cls):
                if cls._instance is None:
                    cls._instance = super(Loader, cls).__new__(cls)
                    cls._instance.mod = load_inline(name="l", cpp_sources="", functions=["fused"])
                return cls._instance
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ext = Loader().mod
            @property
            def threads(self) -> int:
                return Launch().threads
            def extra_repr(self) -> str:
                return f"threads={self.threads}"
            def __repr__(self) -> str:
                return "ModelNew()"
            def forward(self, x):
                return self.ext.fused(x)
        """),
    Rule("string_annotations", """
        def f(x: "__import__('os').system('id')"):
            return x
        class ModelNew(nn.Module):
            def forward(self, x):
                return x
        """, T, "__import__", """
        from typing import Tuple
        class ModelNew(nn.Module):
            def forward(self, x: "torch.Tensor") -> "Tuple[torch.Tensor, int]":
                return ext.fused(x), 0
        """),
    Rule("tensor_subclass", """
        class Lazy(torch.Tensor):
            pass
        class ModelNew(nn.Module):
            def forward(self, x):
                return x.as_subclass(Lazy)
        """, T, "torch.Tensor subclass", """
        class Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return ext.fused(x)
            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return grad
        class ModelNew(nn.Module):
            def forward(self, x):
                return Fused.apply(x)
        """),
    Rule("torch_compute", """
        class ModelNew(nn.Module):
            def forward(self, x):
                return x.relu().sum()
        """, C, "is a torch compute method", """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.side = torch.cuda.Stream()
                self.w = nn.Parameter(torch.randn(4, 4).softmax(dim=-1))
            def forward(self, x):
                out = torch.empty_like(x)
                out.zero_()
                out.fill_(0.0)
                y = x.type(torch.float32).float().to(torch.float16).contiguous()
                flat = torch.flatten(x, 1)
                z = torch.reshape(x, (-1,))
                patches = x.unfold(2, 4, 4).unfold(3, 4, 4).contiguous()
                main = torch.cuda.current_stream()
                self.side.wait_stream(main)
                done = torch.cuda.Event()
                with torch.cuda.stream(self.side):
                    out.copy_(ext.fused(x))
                    done.record()
                out.record_stream(self.side)
                main.wait_event(done)
                main.wait_stream(self.side)
                return ext.relu(out)
        """),
    Rule("forward_reachability", """
        def act(x):
            return torch.sigmoid(x) * x
        class ModelNew(nn.Module):
            def forward(self, x):
                return act(x)
        """, C, "torch.sigmoid()", """
        W0 = torch.randn(4) * 0.5
        def init_weights(w):
            nn.init.xavier_uniform_(w)
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        class ModelNew(nn.Module):
            def __init__(self, n=4):
                super().__init__()
                self.w = nn.Parameter(torch.empty(n, n))
                init_weights(self.w)
            def forward(self, x):
                return ext.fused(x)
        def get_inputs():
            return [torch.randn(2, 4).relu()]
        """),
    Rule("fallback", """
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    return ext.fused(x)
                except RuntimeError:
                    return torch.relu(x)
        """, F, "a try statement in forward()", """
        try:
            import numpy as np
        except ImportError:
            np = None
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        def check_against_reference(x):
            try:
                return Model()(x)
            except RuntimeError:
                return None
        class Base(nn.Module):
            def forward(self, x):
                return x
        class Marker:
            pass
        class ModelNew(Base):
            def forward(self, x):
                return ext.fused(x)
        """),
]
RULE_IDS = [r.rule for r in RULES]


@pytest.mark.parametrize("r", RULES, ids=RULE_IDS)
def test_attack_is_refused_with_its_reason(r: Rule) -> None:
    profile = "kernelbench" if r.code == F else "cuda-agent"
    v = sc.check_source(src(EXT, r.attack), "cand.py", profile)
    assert v.status == "refused" and v.code == r.code, [f.text() for f in v.findings]
    assert r.text in v.findings[0].message, v.findings[0].message
    other = sc.check_source(src(EXT, r.attack), "cand.py",
                            "cuda-agent" if profile == "kernelbench" else "kernelbench")
    if r.code == T:  # tampering: every profile
        assert other.code == T
    elif r.code == C:  # compute: a note under kernelbench
        assert other.status == "ok" and other.notes, other
    else:  # a fallback: the torch it would run is what cuda-agent refuses
        assert other.code in ("", C)


@pytest.mark.parametrize("profile", sc.PROFILES)
@pytest.mark.parametrize("r", RULES, ids=RULE_IDS)
def test_honest_idiom_passes(r: Rule, profile: str) -> None:
    v = sc.check_source(src(EXT, r.idiom), "cand.py", profile)
    assert v.status == "ok", [f.text() for f in v.findings]


def test_docs_table_names_every_rule() -> None:
    text = DOC.read_text()
    table = re.findall(r"^\| `([a-z_]+)` \|", text, re.MULTILINE)
    assert set(RULE_IDS) <= set(table), set(RULE_IDS) - set(table)


# ---- the corpus's idioms, and the attacks next to each relaxation ---------------------------

@pytest.mark.parametrize("body, text", [
    # a class of the file, rebound or decorated, may be something else
    ("class E:\n    pass\nE = torch.cuda.Event\nE.elapsed_time = None\n",
     "setting torch.cuda.Event.elapsed_time"),
    ("def swap(c):\n    return torch.cuda.Event\n@swap\nclass E:\n    pass\n"
     "E.elapsed_time = None\n",
     "setting E.elapsed_time"),
    ("class E:\n    pass\ndef f(E):\n    E.elapsed_time = None\n", "setting E.elapsed_time"),
    # through a class of the file, an attribute holding a class
    ("class H:\n    ev = torch.cuda.Event\nH.ev.elapsed_time = None\n", "ev is bound"),
    # through self: a class stored by setattr, a __dict__ write, a tuple, a helper's attribute
    ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        setattr(self, 'ev', torch.cuda.Event)\n        self.ev.elapsed_time = None\n",
     "ev is bound"),
    ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.__dict__['ev'] = torch.cuda.Event\n        self.ev.elapsed_time = None\n",
     "ev is bound"),
    ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.__dict__.update(ev=torch.cuda.Event)\n        self.ev.x = None\n",
     "ev is bound"),
    ("class M(nn.Module):\n    def __init__(self, c=torch.cuda.Event):\n"
     "        super().__init__()\n        self.ev, self.n = c, 1\n"
     "        self.ev.elapsed_time = None\n", "ev is bound"),
    ("def get():\n    return torch.cuda.Event\nclass M(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.ev = get()\n        self.ev.elapsed_time = None\n",
     "ev is bound"),
    ("class H:\n    def clone(self):\n        return torch.cuda.Event\nclass M(nn.Module):\n"
     "    def __init__(self):\n        super().__init__()\n        self.ev = H().clone()\n"
     "        self.ev.elapsed_time = None\n", "ev is bound"),
    # items: any container can be given a class (ModuleList.insert does not check)
    ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.l = nn.ModuleList()\n        self.l.insert(0, torch.cuda.Event)\n"
     "        self.l[0].elapsed_time = None\n", "an item reached this way"),
    # a loop over self's modules, in a file that puts a class among them
    ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self._modules['e'] = torch.cuda.Event\n        for m in self.children():\n"
     "            m.elapsed_time = None\n", "setting m.elapsed_time"),
    ("class M(nn.Module):\n    def modules(self):\n        return [torch.cuda.Event]\n"
     "    def f(self):\n        for m in self.modules():\n            m.elapsed_time = None\n",
     "setting m.elapsed_time"),
    ("class M(nn.Module):\n    def f(self):\n        for m in self.modules():\n"
     "            m = make()\n            m.elapsed_time = None\n", "setting m.elapsed_time"),
    # self rebound, type() of something else
    ("class M(nn.Module):\n    def f(self, x):\n        self = x\n        self.add = None\n",
     "setting self.add"),
    ("class M(nn.Module):\n    def f(self, x):\n        type(x).add = None\n",
     "setting type(x).add"),
    # __new__ where the harness constructs: ModelNew, or a class it inherits from (an alias too)
    ("class L:\n    def __new__(cls):\n        return torch.cuda.Event\nclass ModelNew(L):\n"
     "    def forward(self, x):\n        return x\n", "defining __new__ in L"),
    ("class L:\n    def __new__(cls):\n        return 1\nB = L\nclass ModelNew(B):\n"
     "    def forward(self, x):\n        return x\n", "defining __new__ in L"),
    ("class L:\n    def f(self):\n        return super().__new__(L)\n", "the attribute __new__"),
    # Fn.forward with anything but None (or the caller's own self) as ctx
    ("class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
     "        ctx.elapsed_time = x\nFn.forward(torch.cuda.Event, None)\n",
     "Fn.forward outside a call on its own instance"),
])
@pytest.mark.parametrize("profile", sc.PROFILES)
def test_attacks_beside_the_relaxations_stay_refused(body: str, text: str, profile: str) -> None:
    v = sc.check_source(src(body), "cand.py", profile)
    assert v.code == T, v
    assert any(text in f.message for f in v.findings), [f.text() for f in v.findings]


CORPUS_IDIOMS = {
    # CUDA-L1's level1_47 / level2_20: the compiled module cached as a class attribute of the
    # candidate's autograd.Function, compiled on first use
    "class_attribute_kernel": """
        class SumDim(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, dim):
                if not hasattr(SumDim, "kernel"):
                    SumDim.kernel = torch.utils.cpp_extension.load_inline(
                        name="sum_dim", cpp_sources="", cuda_sources="", functions=["sum_dim"])
                out = torch.empty(x.shape[0], 1, device=x.device)
                SumDim.kernel.sum_dim(x, out)
                return out
            @staticmethod
            def backward(ctx, grad):
                return grad, None
        class ModelNew(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim
            def forward(self, x):
                return SumDim.apply(x, self.dim)
        """,
    # CUDA-L1's level3_8: a singleton loader (__new__) and an autograd.Function's forward
    # called directly with ctx None
    "singleton_and_direct_forward": """
        class Loader:
            _instance = None
            def __new__(cls):
                if cls._instance is None:
                    cls._instance = super(Loader, cls).__new__(cls)
                    cls._instance.mod = None
                    cls._instance.load()
                return cls._instance
            def load(self):
                self.mod = load_inline(name="rb", cpp_sources="", functions=["block"])
        class Block(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return Loader().mod.block(x)
        class ModelNew(nn.Module):
            def forward(self, x):
                return Block.forward(None, x)
        """,
    # leaderboard AlexNet/VGG: torch.flatten between the candidate's kernels
    "torch_flatten": """
        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.fused(torch.flatten(ext.fused(x), 1))
        """,
}


@pytest.mark.parametrize("profile", sc.PROFILES)
@pytest.mark.parametrize("name", sorted(CORPUS_IDIOMS))
def test_corpus_idioms_pass(name: str, profile: str) -> None:
    v = sc.check_source(src(EXT, CORPUS_IDIOMS[name]), "cand.py", profile)
    assert v.status == "ok", [f.text() for f in v.findings]


@pytest.mark.parametrize("profile", sc.PROFILES)
def test_utf8_with_a_cookie_or_a_bom_passes(profile: str) -> None:
    """The load_failed row's idiom: UTF-8 spelled either way Python honours."""
    body = src(EXT, "class ModelNew(nn.Module):\n    def forward(self, x):\n"
                    "        return ext.fused(x)  # \u00e9\n")
    for data in (b"# -*- coding: utf-8 -*-\n" + body, b"\xef\xbb\xbf" + body):
        v = sc.check_source(data, "cand.py", profile)
        assert v.status == "ok", v


def test_torch_jit_script_is_deferred_compute_and_the_rest_of_jit_tampering() -> None:
    """CUDA-L1's level3_32 scripts its torch transformer layers: TorchScript compiled from torch's
    modules and the file's own functions runs torch ops later, as torch.compile does (refused
    under cuda-agent, a note under kernelbench); TorchScript from a string, a file or on another
    thread stays tampering."""
    scripted = src(EXT, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
            def forward(self, x):
                return self.layers(ext.fused(x))
        """)
    v = sc.check_source(scripted, "cand.py", "cuda-agent")
    assert v.code == C and "torch.jit.script is torch compute" in v.message, v
    v = sc.check_source(scripted, "cand.py", "kernelbench")
    assert v.status == "ok" and any("torch.jit.script" in n for n in v.notes), v
    for body in ("cu = torch.jit.CompilationUnit('def f(x): return x')\n",
                 "m = torch.jit.load('/plan.pt')\n", "f = torch.jit.fork(len, [])\n",
                 "import torch.jit as J\n"):
        for profile in sc.PROFILES:
            assert sc.check_source(src(body), "cand.py", profile).code == T, body
