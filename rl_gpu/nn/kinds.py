"""Policy kinds: one registry that building (``--policy``), loading a checkpoint (``rl_gpu.load``, ``evaluate``)
and export all go through, so a policy of your own is one :func:`register_policy_kind` call away.

A kind names a class built as ``Class(**config)`` from the ``config()`` a policy records in its checkpoints (the
``kind`` entry aside). What a checkpoint may say about it is declared here (``keys``: each entry's type), so a
file's ``policy_config`` is checked before anything is built, and a file can only name a kind registered by code:
loading never imports anything a file names.

What a policy of any kind offers (the :class:`~rl_gpu.algos.base.ExportablePolicy` protocol and PPO's needs):
``act(obs, action_mask, generator, deterministic, noise, critic_obs=None) -> PolicyOutput``,
``evaluate(obs, action, action_mask, critic_obs=None) -> (log_prob, entropy, value)``, ``value(obs)``,
``update_normalizer(obs, weight, critic_obs=None)``, ``config()``, ``export_module()``
(a :class:`~rl_gpu.nn.deploy.DeployedActor`), and the attributes ``obs_dim``, ``is_continuous`` and
``num_actions`` or ``action_dim``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_gpu.core.named import NamedRegistry, load_entry

KEY_TYPES = (int, bool, float, list, "bounds", "json")
"""What a config entry may be declared as: a positive int, a bool, a finite float, a list of positive ints
(``hidden_sizes``), ``"bounds"`` (a list of finite floats), or ``"json"`` (an object of plain JSON values: a
library's own model configuration)."""
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_ENTRY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


@dataclass(frozen=True, eq=True)
class PolicyKind:
    """One kind of policy."""

    name: str
    """The ``kind`` its ``config()`` records (lowercase letters, digits, ``_``)."""
    factory: str
    """``"module:Class"``: ``Class(**config)`` rebuilds it (imported on first use)."""
    keys: Mapping[str, Any]
    """The entries its config may hold, each with its type (:data:`KEY_TYPES`)."""
    required: tuple[str, ...]
    """The entries its config must hold."""
    actions: str
    """``"discrete"``, ``"continuous"`` or ``"any"`` (a kind whose head follows the environment's actions)."""
    for_env: str | None = None
    """``"module:function"``: ``function(spec, hidden_sizes, normalize_obs, init_log_std)`` -> a fresh policy for an
    environment (what ``--policy NAME`` trains); None: built by its algorithm only (off-policy actors)."""
    summary: str = field(default="")
    """One line for messages and ``--help``."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or self.name == "auto":
            raise ValueError(f"policy kind name must be lowercase letters, digits and '_' (not 'auto'), got "
                             f"{self.name!r}")
        for what in ("factory", "for_env"):
            value = getattr(self, what)
            if value is not None and (not isinstance(value, str) or not _ENTRY.fullmatch(value)):
                raise ValueError(f"{what} must look like 'package.module:Name', got {value!r}")
        bad = {k: v for k, v in dict(self.keys).items() if not isinstance(k, str) or v not in KEY_TYPES}
        if bad:
            raise ValueError(f"keys must map names to one of {KEY_TYPES}, got {bad}")
        missing = [k for k in self.required if k not in self.keys]
        if missing:
            raise ValueError(f"required entries {missing} are not among the keys")
        if self.actions not in ("discrete", "continuous", "any"):
            raise ValueError(f"actions must be 'discrete', 'continuous' or 'any', got {self.actions!r}")

    def build(self, config: Mapping[str, Any]) -> Any:
        """The policy ``config`` describes (its ``kind`` entry aside)."""
        return load_entry(self.factory)(**{k: v for k, v in config.items() if k != "kind"})

    def for_environment(self, spec: Any, hidden_sizes: Sequence[int], normalize_obs: bool,
                        init_log_std: float) -> Any:
        """A fresh policy for environments of ``spec``; ``ValueError`` when this kind cannot act there."""
        if self.for_env is None:
            raise ValueError(f"policy kind {self.name!r} is built by its own algorithm, not chosen with --policy")
        if self.actions != "any" and spec.is_continuous != (self.actions == "continuous"):
            theirs = "continuous" if spec.is_continuous else "discrete"
            raise ValueError(f"policy kind {self.name!r} takes {self.actions} actions; the environment's are "
                             f"{theirs}")
        return load_entry(self.for_env)(spec, tuple(hidden_sizes), normalize_obs, init_log_std)


_KINDS = NamedRegistry(PolicyKind, "policy kind")


def register_policy_kind(kind: PolicyKind, *, override: bool = False) -> None:
    """Make ``kind`` buildable, loadable and exportable (``ValueError`` for a name taken, unless ``override``)."""
    _KINDS.register(kind, override)


def unregister_policy_kind(name: str) -> None:
    """Remove ``name`` (a plugin's tests clean up with it)."""
    _KINDS.unregister(name)


def policy_kind_names() -> tuple[str, ...]:
    """Every registered kind, built-in ones first."""
    return _KINDS.names()


def policy_kind(name: object) -> PolicyKind:
    """The kind registered as ``name``; :class:`~rl_gpu.core.errors.UsageError` (a ``ValueError``) naming the
    known ones otherwise."""
    return _KINDS.get(name)


def build_policy(config: Mapping[str, Any]) -> Any:
    """Rebuild a policy from its ``config()`` dictionary (as stored in checkpoints)."""
    return policy_kind(config.get("kind")).build(config)


_SQUASHED = {"obs_dim": int, "action_dim": int, "hidden_sizes": list, "normalize_obs": bool,
             "action_low": "bounds", "action_high": "bounds"}
_ON_POLICY = "rl_gpu.nn.actor_critic:mlp_for_env"
register_policy_kind(PolicyKind(
    "categorical", "rl_gpu.nn.actor_critic:ActorCritic",
    {"obs_dim": int, "num_actions": int, "hidden_sizes": list, "normalize_obs": bool, "critic_obs_dim": int,
     "world_agents": int},
    ("obs_dim", "num_actions"), "discrete", _ON_POLICY,
    "masked categorical actor-critic (MLP; frames flattened)"))
register_policy_kind(PolicyKind(
    "gaussian", "rl_gpu.nn.actor_critic:GaussianActorCritic",
    {"obs_dim": int, "action_dim": int, "hidden_sizes": list, "normalize_obs": bool, "init_log_std": float,
     "critic_obs_dim": int, "world_agents": int},
    ("obs_dim", "action_dim"), "continuous", _ON_POLICY,
    "diagonal Gaussian actor-critic (MLP; frames flattened)"))
register_policy_kind(PolicyKind(
    "tanh_gaussian", "rl_gpu.nn.tanh_gaussian:TanhGaussianActorCritic",
    {"obs_dim": int, "action_dim": int, "hidden_sizes": list, "normalize_obs": bool, "init_log_std": float,
     "critic_obs_dim": int, "action_low": "bounds", "action_high": "bounds"},
    ("obs_dim", "action_dim", "action_low", "action_high"), "continuous",
    "rl_gpu.nn.tanh_gaussian:tanh_gaussian_for_env",
    "Gaussian actor-critic whose actions are tanh-squashed into the bounds (Brax's PPO distribution)"))
register_policy_kind(PolicyKind(
    "squashed_gaussian", "rl_gpu.nn.squashed:SquashedGaussianActor", _SQUASHED,
    ("obs_dim", "action_dim", "action_low", "action_high"), "continuous", None, "SAC's tanh-squashed actor"))
register_policy_kind(PolicyKind(
    "deterministic", "rl_gpu.nn.squashed:DeterministicActor", {**_SQUASHED, "exploration_noise": float},
    ("obs_dim", "action_dim", "action_low", "action_high"), "continuous", None, "TD3's deterministic actor"))
register_policy_kind(PolicyKind(
    "composed", "rl_gpu.nn.composed:ComposedActorCritic",
    {"obs_shape": list, "num_actions": int, "action_dim": int, "hidden_sizes": list, "channels": list,
     "memory_size": int, "lstm": bool, "normalize_obs": bool, "init_log_std": float, "critic_obs_dim": int},
    ("obs_shape",), "any", "rl_gpu.nn.composed:composed_for_env",
    "encoder (CNN for [H, W, C] frames, else MLP) + optional GRU/LSTM memory + head, and its own critic"))
register_policy_kind(PolicyKind(
    "per_agent", "rl_gpu.nn.per_agent:PerAgentActorCritic",
    {"obs_dim": int, "num_agents": int, "num_actions": int, "action_dim": int, "hidden_sizes": list,
     "normalize_obs": bool, "init_log_std": float, "critic_obs_dim": int},
    ("obs_dim", "num_agents"), "any", None, "one actor-critic per agent, stacked (MAPPO/IPPO without sharing)"))
register_policy_kind(PolicyKind(
    "transformer", "rl_gpu.nn.transformer:TransformerPolicy",
    {"vocab_size": int, "prompt_length": int, "response_length": int, "width": int, "layers": int, "heads": int,
     "lora_rank": int},
    ("vocab_size", "prompt_length", "response_length"), "discrete", "rl_gpu.nn.transformer:transformer_for_env",
    "decoder-only transformer over a text environment's token buffer, with a key-value cache (rl_gpu.envs.text)"))
register_policy_kind(PolicyKind(
    "hf_causal_lm", "rl_gpu.nn.hf_causal:HFCausalLMPolicy",
    {"hf_config": "json", "prompt_length": int, "response_length": int, "lora_rank": int},
    ("hf_config", "prompt_length", "response_length"), "discrete", None,
    "a Hugging Face transformers causal LM over a text environment's tokens (--init FOLDER of the LM algorithms)"))
register_policy_kind(PolicyKind(
    "multihead", "rl_gpu.nn.multihead:MultiHeadActorCritic",
    {"obs_dim": int, "num_actions": int, "num_tasks": int, "hidden_sizes": list, "normalize_obs": bool,
     "critic_obs_dim": int},
    ("obs_dim", "num_actions", "num_tasks"), "any", "rl_gpu.nn.multihead:multihead_for_env",
    "one actor head per task of a multitask: batch (categorical; multihead_gaussian for continuous actions)"))
register_policy_kind(PolicyKind(
    "multihead_gaussian", "rl_gpu.nn.multihead:MultiHeadGaussianActorCritic",
    {"obs_dim": int, "action_dim": int, "num_tasks": int, "hidden_sizes": list, "normalize_obs": bool,
     "init_log_std": float, "critic_obs_dim": int},
    ("obs_dim", "action_dim", "num_tasks"), "continuous", "rl_gpu.nn.multihead:multihead_for_env",
    "Gaussian actor-critic with one mean head per task of a multitask: batch (--policy multihead on them)"))
