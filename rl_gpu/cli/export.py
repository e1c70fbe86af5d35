"""``rl-gpu export``: a checkpoint's policy as a deployable ONNX or TorchScript model."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import tyro

from rl_gpu.cli.parsing import check_trusted_env, fail, flag_as_positional, parse
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.envs.registry import make, named_ids_only
from rl_gpu.interop.export import SUFFIXES, DeterministicPolicy, ExportError, deployable, policy_bytes
from rl_gpu.interop.policy_io import load_policy
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.runtime.checkpoint import CheckpointError
from rl_gpu.runtime.files import atomic_write_bytes, check_output

PROG = "rl-gpu export"


@dataclass(frozen=True)
class ExportConfig:
    """Export a checkpoint's policy as a deployable model: observations -> deterministic action."""

    checkpoint: tyro.conf.Positional[Path]
    """checkpoint file written by `rl-gpu train` (best.pt or last.pt); also taken as --checkpoint PATH"""
    output: Path
    """file to write"""
    format: Literal["onnx", "torchscript", "hf"] | None = None
    """model format (default: from the output's suffix, .onnx or .pt/.pth/.ts); hf: a text task's transformer
    policy as a Hugging Face folder (GPT-2 weights and tokenizer) at the new path --output"""
    clip_actions: bool = False
    """continuous policies: clamp the action to the environment's bounds inside the model (the bounds of the
    checkpoint's env_id)"""
    quantize: Literal["int8"] | None = None
    """ONNX only: int8 weights (onnxruntime dynamic quantisation); reports the agreement with the float policy
    on held-out observations of the checkpoint's environment, and the CPU latency"""
    trust_env: str | None = None
    """--clip-actions, --quantize: the checkpoint's environment id, when it is your own
    'package.module:ClassName': allows importing that module (which runs its code) to build it"""

    def resolved_format(self) -> str:
        if self.format is not None:
            return self.format
        fmt = SUFFIXES.get(self.output.suffix.lower())
        if fmt is None:
            raise ValueError(
                f"cannot tell the format from {self.output.name!r}: pass --format onnx or torchscript"
            )
        return fmt


def action_bounds(policy: torch.nn.Module, env_id: object) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(low, high)`` of the actions of ``env_id``'s environment, for ``--clip-actions``; ``ValueError``
    when the policy is discrete or the environment has no bounds."""
    if not policy.is_continuous:
        raise ValueError("--clip-actions applies to continuous actions; this checkpoint's policy is discrete")
    if not isinstance(env_id, str):
        raise ValueError("--clip-actions reads the action bounds of the checkpoint's env_id, and it has none")
    try:
        env = make(env_id, num_envs=1)
    except ImportError as e:
        raise ValueError(f"--clip-actions cannot build {env_id} to read its action bounds ({e})") from None
    try:
        low, high = tuple(env.spec.action_low), tuple(env.spec.action_high)
    finally:
        env.close()
    if not low or not high:
        raise ValueError(f"--clip-actions: {env_id} declares no action bounds")
    return low, high


def quantized(policy: torch.nn.Module, model: bytes, float_model: DeterministicPolicy,
              payload: dict) -> tuple[bytes, list[str]]:
    """``(the int8 model, report lines)``: agreement with the float policy on held-out observations of the
    checkpoint's environment, and the CPU latency of both models."""
    from rl_gpu.interop.quantize import agreement, held_out_observations, latency, quantize_int8

    env_id = payload.get("env_id")
    if not isinstance(env_id, str):
        raise ExportError("--quantize int8 measures agreement on observations of the checkpoint's env_id, "
                          "and it has none")
    int8 = quantize_int8(model)
    seed = derive_seed(int(payload.get("seed") or 0), "export-held-out")
    obs, mask = held_out_observations(policy, env_id, seed)
    lines = [agreement(float_model, int8, obs, mask).describe()]
    fast, slow = latency(int8, float_model.obs_dim), latency(model, float_model.obs_dim)
    lines.append("CPU latency (onnxruntime, 1 thread, median): " + ", ".join(
        f"batch {b} {fast[b] * 1e3:.3f} ms (float {slow[b] * 1e3:.3f} ms)" for b in fast))
    return int8, lines


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and export; exit 2 with a one-line error for a bad checkpoint or missing packages."""
    config = parse(ExportConfig, PROG, flag_as_positional(argv, "--checkpoint", PROG),
                   description=ExportConfig.__doc__)
    if config.trust_env is not None and not (config.clip_actions or config.quantize):
        fail(PROG, "--trust-env applies to --clip-actions and --quantize (the only exports that build the "
                   "checkpoint's environment), and neither is given")
    with named_ids_only([config.trust_env]):
        return _export(config)


def agent_outputs(output: Path, num_agents: int) -> list[Path]:
    """Where the actors of a policy with one network per agent go: ``actor.onnx`` -> ``actor.agent0.onnx``, ..."""
    return [output.with_name(f"{output.stem}.agent{m}{output.suffix}") for m in range(num_agents)]


def _export_hf(config: ExportConfig) -> int:
    from rl_gpu.interop.hf import write_hf_folder
    from rl_gpu.nn.hf_causal import HFCausalLMPolicy
    from rl_gpu.nn.transformer import TransformerPolicy

    if config.quantize is not None or config.clip_actions:
        raise ExportError("--format hf writes the float model as it is: without --quantize and --clip-actions")
    policy, payload = load_policy(config.checkpoint, torch.device("cpu"))
    env_id = payload.get("env_id")
    if not isinstance(policy, (TransformerPolicy, HFCausalLMPolicy)) or not isinstance(env_id, str):
        raise ExportError("--format hf exports the transformer policies of text tasks (--algo sft / grpo); this "
                          f"checkpoint holds a {type(policy).__name__}")
    env = make(env_id, num_envs=1)
    write_hf_folder(policy, env.vocab, config.output, {"env_id": env_id, "update": payload.get("update"),
                                                      "checkpoint": str(config.checkpoint)})
    model = type(policy.model).__name__ if isinstance(policy, HFCausalLMPolicy) else "GPT2LMHeadModel"
    print(f"wrote {config.output} (hf): {model} and its tokenizer "
          f"(transformers.AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load them)")
    return 0


def _export(config: ExportConfig) -> int:
    bounds: dict = {}
    report: list[str] = []
    written: list[Path] = []
    try:
        fmt = config.resolved_format()
        if fmt == "hf":
            return _export_hf(config)
        if config.quantize is not None and fmt != "onnx":
            raise ExportError(f"--quantize {config.quantize} applies to ONNX exports; this one is {fmt}")
        check_output(config.output, [config.checkpoint])
        policy, payload = load_policy(config.checkpoint, torch.device("cpu"))
        per_agent = callable(getattr(policy, "agent", None))
        if is_recurrent(policy) and config.quantize is not None:
            raise ExportError("--quantize measures agreement on single observations; this policy has memory: export "
                              "it without --quantize (state in and out)")
        if per_agent and config.quantize is not None:
            raise ExportError("--quantize measures agreement on one policy's observations; this checkpoint has one "
                              "network per agent: export without --quantize (one file per agent)")
        # One network per agent: one file each, every path checked before any is written.
        parts = ([(path, policy.agent(m)) for m, path in enumerate(agent_outputs(config.output, policy.num_agents))]
                 if per_agent else [(config.output, policy)])
        if per_agent:
            for path, _ in parts:
                check_output(path, [config.checkpoint])
        if config.clip_actions or config.quantize:
            check_trusted_env(payload.get("env_id"), config.checkpoint, config.trust_env)
        if config.clip_actions:
            bounds["action_low"], bounds["action_high"] = action_bounds(policy, payload.get("env_id"))
        metadata = {"env_id": payload.get("env_id"), "update": payload.get("update"),
                    "global_step": payload.get("global_step"), "checkpoint": str(config.checkpoint)}
        files = []
        for m, (path, part) in enumerate(parts):
            data = policy_bytes(part, fmt, {**metadata, "agent": m} if per_agent else metadata, **bounds)
            model = deployable(part, **bounds)
            if config.quantize is not None:
                data, report = quantized(part, data, model, payload)
            files.append((path, data))
        for path, data in files:
            atomic_write_bytes(path, data, [config.checkpoint])
            written.append(path)
    except (CheckpointError, ExportError, UsageError, ValueError, OSError) as e:
        fail(PROG, str(e))
    inputs = f"obs [N, {model.obs_dim}] float32"
    size = getattr(model, "state_size", 0)
    if size:
        inputs += f", state [N, {size}] float32 (zeros at an episode's start)"
    if model.discrete:
        inputs += f", action_mask [N, {model.num_actions}] bool (optional)"
        output = "action [N] int64"
    else:
        output = f"action [N, {model.action_dim}] float32"
    if size:
        output += f", state_out [N, {size}] float32 (the next step's state)"
    notes = ["observation normalisation included"] if model.normalize else []
    if model.clip_actions:
        low, high = list(bounds["action_low"]), list(bounds["action_high"])
        notes.append(f"actions clipped to low {low}, high {high}")
    if config.quantize is not None:
        notes.append(f"{config.quantize} weights")
    names = ", ".join(str(p) for p in written)
    each = " (one per agent, agent m's actor in .agent<m>)" if len(written) > 1 else ""
    print(f"wrote {names} ({fmt}){each}: {inputs} -> {output}{''.join('; ' + n for n in notes)}")
    for line in report:
        print(line)
    return 0

if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
