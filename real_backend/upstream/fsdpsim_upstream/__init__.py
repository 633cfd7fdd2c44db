"""fsdpsim's upstream backend: runs a .seq on the real PyTorch FSDP2, PEFT and
accelerate in gloo rank processes and reports observations in the JSON that
`fsdpsim run --json` prints. It calls the pinned libraries as installed
dependencies and copies none of their code."""

import logging

# bitsandbytes (peft imports it) warns at import that the optional `kernels` package is missing
# and then uses its own CPU path (bitsandbytes/backends/cpu/ops.py); left on stderr, its
# "No module named" would read as a broken .venv to the pool's start diagnosis.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
