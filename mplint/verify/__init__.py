"""``mplint verify``: run a training script briefly under instrumentation and report what mixed
precision really does to it. The instrumented process imports TensorFlow; the parent does not."""
