"""What SAC and TD3 share: their common hyper-parameters, collection into the replay buffer, and the
algorithm machinery around their losses."""
