"""Data, tensor and hybrid parallel training over MPI, and the cost model of Megatron's layouts."""
