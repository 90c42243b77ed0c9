"""GPU node health: the NCCL ``all_reduce_perf`` check (``check``, ``main``) and slurmd's quick check."""
