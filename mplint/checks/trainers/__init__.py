"""MPT7xx: mixed precision configured through a trainer stack (Hugging Face Trainer and Accelerate, Lightning,
DeepSpeed, FSDP), read by ``mplint.checks.trainers.config``."""
