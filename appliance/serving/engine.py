"""The inference engine: a supervised vLLM server, its state machine, weight sync and canary.

States (schemas.ENGINE_TRANSITIONS, persisted through the store so the TUI and a restart see them):

    SERVING -> DRAINING -> SLEEPING -> SYNCING -> WAKING -> CANARY -> SERVING

DRAINING waits for the model calls the proxy has in flight (`try_admit`/`release` count them); only
SERVING admits new ones. On the GPU, SLEEPING frees memory through vLLM's sleep mode; on the CPU sleep
mode does not exist, so the engine only stops serving. Every successful sync bumps the policy version.

The canary: after every sync or wake the engine greedily generates `engine.canary_tokens` tokens of a
fixed prompt. After a sync they must agree with the trainer's own greedy output for the new weights
(appliance.training.reference, run in a subprocess: serving never imports torch); after a plain wake
with the output recorded when these weights were last verified. Agree means equal on the cpu profile and
within `engine.canary_tolerance` nats per token on the gpu profile, where bfloat16 serving meets a
float32 reference (appliance.serving.canary). A sync that fails any step
(unreadable checkpoint, engine error, canary mismatch) puts the previous weights back, records the
error and raises `EngineError`: the old policy keeps serving.

Full weights are reloaded in place (`/collective_rpc reload_weights`), except for models with tied
input/output embeddings (SmolLM2): vLLM 0.32's in-place reload leaves the tied lm_head stale (it logs
"ParallelLMHead: Failed to load weights" and the canary catches it), so those restart the server on the
new folder instead.

A supervisor thread (supervisor.py) restarts a server that died or hangs (the error is recorded as an
event); requests in flight at that moment fail, and the proxy records them as infra errors. A server that
dies while the engine sleeps is started again when it is next needed, by `resume` or the sync.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import httpx

from appliance.config import Settings
from appliance.errors import ApplianceError, EngineError
from appliance.lineage import check_base
from appliance.schemas import EngineState, Event
from appliance.serving import process
from appliance.serving.canary import Canary, Offset, compare, reference
from appliance.serving.supervisor import supervise
from appliance.serving.weights import Weights, WeightsKind, is_under, stored_weights, ties_embeddings
from appliance.store import Store

WEIGHTS_PATHS = ("/sleep", "/wake_up", "/collective_rpc", "/v1/load_lora_adapter")
CANARY_TEXT = "The appliance canary: count the planets of the solar system, then name the largest."


class Engine:
    def __init__(self, settings: Settings, store: Store, model_path: Path | str | None = None, *,
                 version: int | None = None) -> None:
        self.settings = settings
        self.store = store
        self.model_path = Path(model_path or settings.model_path)  # tokenizer and initial weights
        self.base_url = f"http://{settings.engine.host}:{settings.engine.port}"
        self._proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._cond = threading.Condition()  # guards _state and _inflight
        self._state = EngineState.STOPPED
        self._inflight = 0
        self._op = threading.RLock()  # one state-machine operation (sync, restart, stop) at a time
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._weights = Weights(self.model_path)
        self._loaded_full: Path | None = None  # the full-weights folder the running server holds
        self._canary_prompt: list[int] | None = None
        self._canary_expected: Canary | None = None
        self._baseline: tuple[Weights, Canary] | None = None  # the weights of the last launch and their canary
        self._offset: Offset | None = None  # the engine's canary offset from the reference, measured once
        self._offset_measured = False
        self.pinned = version  # `appliance eval --version N`: never recorded as served, takes no new weights
        self.policy_version = store.engine_state()[1] if version is None else version
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(120.0, connect=5.0))
        self._weights_timeout = httpx.Timeout(settings.engine.weights_timeout_s, connect=5.0)

    # --- what the proxy reads -------------------------------------------------------------------
    @property
    def state(self) -> EngineState:
        return self._state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def model_name(self) -> str:
        """The name requests must carry now: the current LoRA adapter's, else the base served name."""
        return self._weights.adapter_name or self.settings.engine.served_model_name

    def try_admit(self) -> bool:
        """Count one model call in flight; False (call refused) unless SERVING."""
        with self._cond:
            if self._state != EngineState.SERVING:
                return False
            self._inflight += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._inflight -= 1
            self._cond.notify_all()

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Launch the server and wait until it serves; restores the weights the store says were served."""
        if not (self.model_path / "config.json").exists():
            raise EngineError(f"no model folder at {self.model_path}",
                              "run `appliance init` to convert the bundled model, or set engine.model")
        with self._op:
            # the configured model must be the base the store's versions were trained from (else
            # ModelMismatch); every full-weights folder served is then that base or a checkpoint of it,
            # and the tokenizer below (the configured folder) is theirs
            check_base(self.store, self.model_path, checkpoints_dir=self.settings.checkpoints_dir,
                       home=self.settings.home)
            stored = Weights.from_json(self.store.engine_state()[2])
            if stored is not None and not is_under(stored.full, self.settings.checkpoints_dir):
                stored = Weights(self.model_path, stored.lora, stored.adapter_name)  # the base, maybe moved
            if self.pinned is not None:
                self._weights = stored_weights(self.store, self.model_path, self.pinned,
                                               self.settings.engine.served_model_name)
            elif stored is not None and stored.exists():
                self._weights = stored
            else:
                self._weights, self.policy_version = Weights(self.model_path), 0
            self._set(EngineState.STARTING, force=True)
            try:
                self._launch()
            except ApplianceError as e:
                self._set(EngineState.FAILED, error=e.message)
                raise
            self._set(EngineState.SERVING, policy_version=self.policy_version, weights=self._weights.to_json())
            self._stopping.clear()
            if self._supervisor is None or not self._supervisor.is_alive():
                self._supervisor = threading.Thread(target=supervise, args=(self,), name="engine-supervisor",
                                                    daemon=True)
                self._supervisor.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._op:
            if self._proc is not None:
                process.kill(self._proc)
                self._proc = None
            if self._state != EngineState.STOPPED:
                self._set(EngineState.STOPPED)
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(timeout=10)

    def _launch(self) -> None:
        """Start the server on the current weights; run the start-up canary to record its baseline."""
        if self._proc is not None:
            process.kill(self._proc)
        for attempt in (1, 2):
            self._proc, self.log_path = process.launch(self.settings, self._weights.full, self.model_path)
            try:
                process.wait_healthy(self._proc, self.base_url, self.settings.engine.startup_timeout_s, self.log_path)
                break
            except process.EngineStalled as e:
                if attempt == 2:
                    raise
                self.store.add_event(Event("error", f"{e.message}; relaunching", data={"component": "engine"}))
        self._loaded_full = self._weights.full
        if self._weights.lora is not None:
            self._load_adapter(self._weights.adapter_name, self._weights.lora)
        self._canary_prompt = None
        # weights loaded from disk at start are what the file says: their output becomes the baseline
        # that later wakes are checked against
        self._canary_expected = self._canary()
        self._baseline = (self._weights, self._canary_expected)

    # --- time-slicing with training ---------------------------------------------------------------
    def pause_for_training(self) -> None:
        """SERVING -> DRAINING -> SLEEPING: wait for in-flight calls, then free the accelerator."""
        with self._op:
            self._require(EngineState.SERVING, "pause_for_training")
            self._set(EngineState.DRAINING)
            deadline = time.monotonic() + self.settings.engine.drain_timeout_s
            with self._cond:
                while self._inflight > 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(timeout=left)
                stuck = self._inflight
            if stuck:
                # calls that outlive the drain timeout are cut off by sleep; the proxy records them as errors
                self.store.add_event(Event("error", f"{stuck} model calls still in flight after "
                                           f"{self.settings.engine.drain_timeout_s:.0f} s of draining"))
            if self._sleep_mode:
                try:
                    self._post("/sleep", params={"level": self.settings.engine.sleep_level})
                except (ApplianceError, httpx.HTTPError) as e:
                    # DRAINING admits nothing and nothing leaves it but sleep: FAILED is what the supervisor
                    # restarts (from the weights on disk), so serving comes back instead of hanging here
                    self._set(EngineState.FAILED,
                              error=f"sleep failed: {e.message if isinstance(e, ApplianceError) else e}")
                    raise
            self._set(EngineState.SLEEPING)

    def resume(self) -> None:
        """SLEEPING -> WAKING -> CANARY -> SERVING with unchanged weights.

        Any failure leaves the engine FAILED, which the supervisor restarts from the weights on disk: WAKING
        and CANARY admit nothing, and nothing else would ever leave them."""
        with self._op:
            self._require(EngineState.SLEEPING, "resume")
            self._set(EngineState.WAKING)
            try:
                if not self._alive:
                    # a fresh server is awake with its weights loaded: nothing to wake
                    self._launch_after_death("while the engine slept", "the same weights")
                elif self._sleep_mode:
                    self._post("/wake_up")
                    if self._weights_discarded:
                        self._reload_full(self._weights.full)
                self._set(EngineState.CANARY)
                verdict = compare(self._canary(), self._canary_expected or Canary([]), self._canary_tolerance)
                if not verdict:
                    raise EngineError(f"canary after wake-up: {verdict.detail}",
                                      "the engine restarts itself; read the engine log if this repeats")
            except (ApplianceError, httpx.HTTPError) as e:
                message = e.message if isinstance(e, ApplianceError) else f"wake-up failed: {e}"
                self._set(EngineState.FAILED, error=message)
                if isinstance(e, EngineError):
                    raise
                raise EngineError(message, f"the engine restarts itself; read {self.log_path}") from e
            self._set(EngineState.SERVING)

    def load_weights(self, path: Path | str, kind: WeightsKind, *, expected: Canary | None = None) -> int:
        """SLEEPING -> SYNCING -> WAKING -> CANARY -> SERVING on new weights; returns the new policy version.

        `expected` is the trainer's own greedy canary output when it has it; else it is computed
        from the checkpoint on disk. On any failure the previous weights serve again and `EngineError`
        is raised.
        """
        path = Path(path)
        if kind not in ("lora", "full"):
            raise EngineError(f"unknown weights kind {kind!r}",
                              "use 'lora' for an adapter folder, 'full' for a model folder")
        if self.pinned is not None:
            raise EngineError(f"this engine serves stored policy version {self.pinned} for an evaluation; it takes "
                              "no new weights", "train with `appliance run`, which serves the loop's own version")
        with self._op:
            self._require(EngineState.SLEEPING, "load_weights")
            previous, previous_expected = self._weights, self._canary_expected
            version = self.policy_version + 1
            if kind == "lora":
                new = Weights(previous.full, path, f"{self.settings.engine.served_model_name}-v{version}")
            else:
                new = Weights(path)
            self._set(EngineState.SYNCING)
            asleep = self._alive  # else it died asleep: _apply starts a server on the new weights, awake
            try:
                if self._sleep_mode and asleep:
                    self._post("/wake_up", params={"tags": "weights"})
                    if self._weights_discarded and kind == "lora":
                        self._reload_full(previous.full)  # the adapter needs its base back in place
                if expected is None:
                    # before the engine touches the files: an unreadable checkpoint must not reach it
                    expected = self.reference_canary(new)
                offset = self._base_offset()
                self._apply(new, previous)
                self._set(EngineState.WAKING)
                if self._sleep_mode and asleep:
                    self._post("/wake_up", params={"tags": "kv_cache"})
                self._set(EngineState.CANARY)
                got = self._canary()
                verdict = compare(got, expected, self._canary_tolerance, offset)
                if not verdict:
                    raise EngineError(
                        f"canary mismatch after syncing {path} against the trainer's weights: {verdict.detail}",
                        "the engine is not serving the weights that were trained; the previous weights serve on",
                    )
                if self._canary_tolerance > 0:  # the evidence that keeps the gpu profile's tolerance honest
                    self.store.add_event(verdict.evidence(self._canary_tolerance, offset))
            except ApplianceError as e:
                self._roll_back(previous, previous_expected, e)
                raise EngineError(f"weight sync of {path} failed: {e.message}", e.hint) from e
            except (httpx.HTTPError, OSError, ValueError) as e:
                self._roll_back(previous, previous_expected, e)
                raise EngineError(f"weight sync of {path} failed: {e}",
                                  f"the previous weights serve on; read {self.log_path}") from e
            if previous.adapter_name and previous.adapter_name != new.adapter_name:
                self._unload_adapter(previous.adapter_name)
            self._canary_expected = got  # what a wake must reproduce: the engine's own output, same kernels
            self.store.add_policy_version(version, self.policy_version, kind, str(path))
            self.policy_version = version
            self._set(EngineState.SERVING, policy_version=version, weights=new.to_json())
            return version

    def _apply(self, new: Weights, previous: Weights) -> None:
        self._weights = new
        if not self._alive:  # the supervisor leaves a sleeping or syncing engine alone
            # a server started on the new weights loads them all (and the adapter)
            self._launch_after_death("during the weight sync or the sleep before it", "the new weights")
        elif new.lora is not None:
            if new.full != previous.full:
                self._reload_full(new.full)
            self._load_adapter(new.adapter_name, new.lora)
        elif ties_embeddings(new.full):
            self._launch()
        else:
            self._reload_full(new.full)

    @property
    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _launch_after_death(self, when: str, what: str) -> None:
        """Start the server that died while the engine slept (or during the sync), on `self._weights`."""
        code = self._proc.poll() if self._proc is not None else None
        self.store.add_event(Event("error", f"the engine process died {when} (exit code {code}); starting it on "
                                   f"{what}", data={"component": "engine", "log": str(self.log_path)}))
        self._launch()

    def _roll_back(self, previous: Weights, previous_expected: Canary | None, error: object) -> None:
        message = error.message if isinstance(error, ApplianceError) else str(error)
        self.store.add_event(Event("error", f"weight sync failed, restoring the previous weights: {message}",
                                   data={"component": "engine"}))
        failed_adapter = self._weights.adapter_name if self._weights.adapter_name != previous.adapter_name else None
        self._weights = previous
        if self._state == EngineState.CANARY:
            self._set(EngineState.SYNCING)
        try:
            alive = self._proc is not None and self._proc.poll() is None
            if not alive or (self._weights_differ_on_engine(previous) and ties_embeddings(previous.full)):
                self._launch()
            elif self._weights_differ_on_engine(previous):
                self._reload_full(previous.full)
            if failed_adapter and alive:
                self._unload_adapter(failed_adapter)
            if self._state == EngineState.SYNCING:
                self._set(EngineState.WAKING)
            if self._sleep_mode:
                self._post("/wake_up")
            self._set(EngineState.CANARY)
            got = self._canary()
            if previous_expected is not None:
                verdict = compare(got, previous_expected, self._canary_tolerance)
                if not verdict:
                    raise EngineError(f"the restored weights fail the canary: {verdict.detail}")
            self._canary_expected = got if previous_expected is None else previous_expected
        except (ApplianceError, httpx.HTTPError, OSError) as e:
            self._set(EngineState.FAILED, error=f"{message}; restoring the previous weights failed too: {e}")
            return
        self._set(EngineState.SERVING, error=message)

    def _base_offset(self) -> Offset | None:
        """The engine-minus-reference canary offset on the weights it was launched on (canary.py), measured at
        the first sync that compares by distance (the gpu profile), then kept: same model, same kernels."""
        if self._canary_tolerance <= 0 or self._baseline is None or self._offset_measured:
            return self._offset
        self._offset_measured = True
        weights, served = self._baseline
        try:
            self._offset = Offset.measure(served, self.reference_canary(weights))
        except ApplianceError as e:
            self.store.add_event(Event("error", f"canary offset not measured, syncs compare without it: {e.message}",
                                       data={"component": "engine"}))
            return None
        self.store.add_event(Event("info", "canary offset of the engine from the trainer's reference on the weights "
                                   f"it started on: {self._offset.describe() if self._offset else 'none measurable'}",
                                   data={"component": "engine", "offset": self._offset.mean if self._offset else 0.0}))
        return self._offset

    def _weights_differ_on_engine(self, previous: Weights) -> bool:
        return self._loaded_full != previous.full

    # --- engine HTTP calls --------------------------------------------------------------------------
    @property
    def _sleep_mode(self) -> bool:
        return self.settings.profile == "gpu" and self.settings.engine.enable_sleep_mode

    @property
    def _weights_discarded(self) -> bool:
        # level 1 offloads the weights to host memory and brings them back; level 2 drops them
        return self.settings.engine.sleep_level == 2

    def _post(self, path: str, *, json_body: dict | None = None, params: dict | None = None) -> httpx.Response:
        # moving the weights (sleep, wake, reload, an adapter) takes minutes on a large model: its own bound
        timeout = self._weights_timeout if path in WEIGHTS_PATHS else httpx.USE_CLIENT_DEFAULT
        r = self._http.post(path, json=json_body, params=params, timeout=timeout)
        if r.status_code >= 400:
            raise EngineError(f"engine {path} answered {r.status_code}: {r.text[:500]}",
                              f"read {self.log_path}")
        return r

    def _reload_full(self, folder: Path) -> None:
        self._post("/collective_rpc", json_body={"method": "reload_weights", "kwargs": {"weights_path": str(folder)}})
        self._post("/reset_prefix_cache")
        self._loaded_full = folder

    def _load_adapter(self, name: str | None, folder: Path) -> None:
        self._post("/v1/load_lora_adapter", json_body={"lora_name": name, "lora_path": str(folder)})

    def _unload_adapter(self, name: str) -> None:
        try:
            self._post("/v1/unload_lora_adapter", json_body={"lora_name": name})
        except (ApplianceError, httpx.HTTPError):
            pass  # an adapter left loaded only costs memory; it is never selected again

    def canary_prompt(self) -> list[int]:
        if self._canary_prompt is None:
            r = self._post("/tokenize", json_body={"model": self.settings.engine.served_model_name,
                                                   "prompt": CANARY_TEXT})
            self._canary_prompt = r.json()["tokens"]
        return self._canary_prompt

    @property
    def _canary_tolerance(self) -> float:
        return self.settings.engine.canary_tolerance

    def _canary(self) -> Canary:
        # logprobs=2: the chosen token's log-probability and the runner-up, at T=1 (greedy requests get
        # the plain log-softmax even in processed_logprobs mode), spelled by id
        r = self._post("/v1/completions", json_body={
            "model": self.model_name(), "prompt": self.canary_prompt(),
            "max_tokens": self.settings.engine.canary_tokens, "temperature": 0.0, "seed": 0,
            "ignore_eos": True, "return_token_ids": True, "logprobs": 2, "return_tokens_as_token_ids": True,
        })
        return Canary.from_completion(r.json()["choices"][0])

    def reference_canary(self, weights: Weights) -> Canary:
        """The trainer's greedy canary output for `weights`, computed by transformers in a subprocess."""
        return reference(self.settings, weights.full, weights.lora, self.canary_prompt())

    # --- state ----------------------------------------------------------------------------------
    def _set(self, state: EngineState, *, force: bool = False, error: str | None = None,
             policy_version: int | None = None, weights: str | None = None) -> None:
        if self.pinned is not None:  # a stored version served for an evaluation is never what the loop serves
            policy_version = weights = None
        self.store.set_engine_state(state, policy_version=policy_version, weights=weights, error=error, force=force)
        with self._cond:
            self._state = state
            self._cond.notify_all()

    def _require(self, state: EngineState, what: str) -> None:
        if self._state != state:
            raise EngineError(f"{what} needs the engine {state.value}, it is {self._state.value}",
                              "pause_for_training() first, then load_weights() or resume()"
                              if state == EngineState.SLEEPING else "wait until the engine serves")

    def wait_serving(self, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._state == EngineState.SERVING, timeout=timeout_s)

