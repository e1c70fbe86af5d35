"""Storage and the maths over it: rollouts, advantages."""
