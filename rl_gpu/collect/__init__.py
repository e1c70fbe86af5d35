"""Collection: stepping environments with a policy into rollout storage (the reference loop, the compiled
engine, the env-only stepper, the seats of turn-based games)."""
