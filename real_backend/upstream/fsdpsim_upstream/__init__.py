"""fsdpsim's upstream backend: runs a .seq on the real PyTorch FSDP2, PEFT and
accelerate in gloo rank processes and reports observations in the JSON that
`fsdpsim run --json` prints. It calls the pinned libraries as installed
dependencies and copies none of their code."""
