"""cuda-agent synth: training tasks made from PyTorch operators (docs/synth.md)."""
