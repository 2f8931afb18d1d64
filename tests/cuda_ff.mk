# (filled by the cuda_ff work)
