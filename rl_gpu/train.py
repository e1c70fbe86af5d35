"""``rl_gpu.train(env=..., algo=..., total_timesteps=..., callbacks=[...], **overrides) -> Run`` trains from Python
(:func:`rl_gpu.cli.api.train`); ``python -m rl_gpu.train`` is the ``rl-gpu train`` command
(:mod:`rl_gpu.cli.train`).

One name for both: this module is callable (its class is replaced below), so ``rl_gpu.train(...)`` works whether
or not the command's module was imported first (importing a submodule sets it as the package's attribute, which
would otherwise hide a function of the same name)."""

import sys
import types

from rl_gpu.cli.safe_path import drop_cwd_from_path

if __name__ == "__main__":  # first, before any other import
    drop_cwd_from_path()

from rl_gpu.cli.train import main  # noqa: E402


class _TrainModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from rl_gpu.cli.api import train

        return train(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _TrainModule
