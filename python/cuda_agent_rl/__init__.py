"""cuda-agent for RL engines (docs/rl.md): rejection fine-tuning data (rft)."""
