"""Algorithms behind one protocol (:class:`rl_gpu.algos.base.Algorithm`); each lives in its own package with
its own configuration. :func:`rl_gpu.algos.registry.make_algorithm` builds one by name."""
