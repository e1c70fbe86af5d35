"""MAPPO and IPPO: PPO on worlds of several agents acting at once, one network shared by the agents."""
