"""Launching and killing the vLLM OpenAI server process (no state machine here; see engine.py).

The server runs in its own process group, so stopping it also stops the EngineCore and worker processes
that vLLM spawns; its output goes to a log file under `$APPLIANCE_HOME/logs`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from appliance.config import Settings
from appliance.errors import EngineError
from appliance.serving.tool_calls import tool_parser

TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")


def command(settings: Settings, weights: Path, tokenizer: Path) -> list[str]:
    e = settings.engine
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(weights), "--tokenizer", str(tokenizer),
        "--served-model-name", e.served_model_name,
        "--host", e.host, "--port", str(e.port),
        "--dtype", e.dtype, "--max-model-len", str(e.max_model_len),
        "--enable-lora", "--max-lora-rank", str(e.max_lora_rank), "--max-loras", "2",
        # sampling defaults come from the request, never from a generation_config.json in the folder
        "--generation-config", "vllm",
        # logprobs after temperature scaling (and top-k/top-p): the distribution the tokens were sampled
        # from, which the trainer reproduces by dividing its logits by the call's recorded temperature
        "--logprobs-mode", "processed_logprobs",
        "--seed", "0",
    ]
    # the parser that reads the calls in the form the chat template writes them (tool_calls.py)
    parser, _ = tool_parser(settings, weights, tokenizer)
    if parser is not None:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
    if e.enforce_eager:
        cmd.append("--enforce-eager")
    if settings.profile == "gpu":
        cmd += ["--gpu-memory-utilization", str(e.gpu_memory_utilization),
                "--tensor-parallel-size", str(e.tensor_parallel_size)]
        if e.enable_sleep_mode:
            # without the second flag vLLM 0.32's sleep keeps the CUDA-graph pool on the GPU, out of the
            # trainer's reach; with it the graphs go to host memory and come back in place on wake
            cmd += ["--enable-sleep-mode", "--sleep-mode-offload-cudagraph"]
        if e.tensor_parallel_size > 1:
            # the FlashInfer all-reduce + RMSNorm fusion (on by default at TP > 1 on Hopper/Blackwell) compiles
            # its kernels at start with nvcc, which the image lacks
            cmd += ["--compilation-config", json.dumps({"pass_config": {"fuse_allreduce_rms": False}})]
    return cmd


# vLLM's server closes a keep-alive connection after this many idle seconds; the proxy's pool drops its own
# idle connections sooner (proxy/app.py), or a call can go out on a socket the server is closing
ENGINE_KEEPALIVE_S = 5


def environment(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    cpus = sorted(os.sched_getaffinity(0))
    env.update({
        "VLLM_SERVER_DEV_MODE": "1",  # /collective_rpc, /sleep, /wake_up, /reset_prefix_cache
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(ENGINE_KEEPALIVE_S),
    })
    if settings.profile == "gpu":
        # FlashInfer's sampler JIT-compiles with nvcc, which the image lacks; vLLM's own torch sampler does not.
        # VLLM_USE_V2_MODEL_RUNNER, copied from our environment with the rest, is the documented fallback
        # should vLLM's Model Runner V2 (its CUDA default) misbehave: set it to 0 (docs/DEPLOYMENT.md)
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    if settings.profile == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(settings.engine.cpu_kvcache_gib)
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}-{cpus[-1]}")
        preload = [str(p) for p in (TCMALLOC, Path(sys.prefix) / "lib" / "libiomp5.so") if p.exists()]
        if preload:
            env["LD_PRELOAD"] = ":".join(filter(None, [*preload, env.get("LD_PRELOAD", "")]))
    return env


def pid_file(settings: Settings) -> Path:
    return settings.home / "engine.pid"


def reap_stale(settings: Settings) -> bool:
    """Kill the engine a killed appliance left running (its process group outlives a SIGKILL of ours).

    Only a process group whose leader is a vLLM server on our port is touched; True when one was killed."""
    path = pid_file(settings)
    try:
        pgid = int(path.read_text().strip())
        cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return False
    ours = b"vllm.entrypoints.openai.api_server" in cmdline and str(settings.engine.port).encode() in cmdline
    if ours and _group_alive(pgid):
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
    path.unlink(missing_ok=True)
    return ours


def launch(settings: Settings, weights: Path, tokenizer: Path) -> tuple[subprocess.Popen, Path]:
    cmd = command(settings, weights, tokenizer)  # refuses a start native tools cannot use, before anything runs
    parser, why = tool_parser(settings, weights, tokenizer)
    reap_stale(settings)
    # another server on the port would answer our health checks and we would never notice ours died
    deadline = time.monotonic() + 5  # a server we just stopped may take a moment to let go
    while _port_taken(settings.engine.host, settings.engine.port):
        if time.monotonic() > deadline:
            raise EngineError(f"port {settings.engine.port} on {settings.engine.host} is already in use",
                              "stop the other engine (an `appliance serve`?) or set engine.port to a free port")
        time.sleep(0.5)
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "engine.log"
    with open(log_path, "ab") as log:
        log.write(f"\n--- start {time.strftime('%Y-%m-%d %H:%M:%S')}: {weights} (tool-call parser "
                  f"{parser or 'none'}: {why})\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, env=environment(settings),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    pid_file(settings).write_text(str(proc.pid))
    return proc, log_path


class EngineStalled(EngineError):
    """The server stopped making progress while starting (its log went quiet); a relaunch usually works."""


# Seen here: after a killed predecessor, vLLM's EngineCore sometimes waits forever for a worker process
# that never appears. A healthy start writes to its log every few seconds, so a long silence is a hang.
STALL_S = 240.0


def wait_healthy(proc: subprocess.Popen, base_url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    last_size, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = log_path.stat().st_size if log_path.exists() else 0
        if size != last_size:
            last_size, last_change = size, time.monotonic()
        elif time.monotonic() - last_change > STALL_S:
            kill(proc)
            raise EngineStalled(f"the engine wrote nothing for {STALL_S:.0f} s while starting",
                                f"read the end of {log_path}; the start is retried once")
        if proc.poll() is not None:
            raise EngineError(
                f"the engine exited with code {proc.returncode} while starting",
                f"read the end of {log_path}; a wrong model folder or a port in use are the usual causes",
            )
        try:
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    kill(proc)
    raise EngineError(
        f"the engine did not become healthy within {timeout_s:.0f} s",
        f"read {log_path}; raise engine.startup_timeout_s if the machine is just slow",
    )


def kill(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the whole process group, SIGKILL what is left after `grace_s`."""
    if proc.poll() is not None and not _group_alive(proc.pid):
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + wait
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_alive(proc.pid):
            break


PROBE_S = 10.0  # how often the engine's supervisor checks that the engine core still generates


def probe(http: httpx.Client, settings: Settings, prompt: list[int]) -> str | None:
    """Why the engine core hangs (a one-token generation unanswered within `engine.hang_timeout_s`), or
    None. vLLM's /health is the API process reading a flag, so only a generation reaches the core."""
    timeout = settings.engine.hang_timeout_s
    try:
        r = http.post("/v1/completions", timeout=timeout, json={
            "model": settings.engine.served_model_name, "prompt": prompt, "max_tokens": 1, "temperature": 0.0})
    except httpx.TimeoutException:
        return f"the engine generated nothing for {timeout:.0f} s (hung; its /health still answered)"
    except httpx.HTTPError:
        return None  # unreachable: the death and /health checks decide that
    return None if r.status_code < 500 else f"the engine's probe generation failed ({r.status_code})"


def _port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
