# (filled by the cpu_ff work)
