"""cuda-agent for RL engines (docs/rl.md): the service client, single-turn rewards, the verl
agent loop (verl_agent) and SFT dataset (verl_sft), the TRL environment (trl_env), prompts
(export), rejection fine-tuning data (rft), the bandit run over candidate kernels (bandit) and
the GRPO smoke run (grpo_smoke). Importing the package, the client, the rewards, the data tools
and the bandit needs neither verl nor TRL; verl_agent/verl_sft import verl, trl_env nothing of
TRL's (TRL calls it), grpo_smoke imports TRL when it runs."""
