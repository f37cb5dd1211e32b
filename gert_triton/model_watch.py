"""`gert serve`'s watch over the models of the running tritonserver (gert_triton/supervisor.py runs it twice a
second): which models readiness waits for, whether each one's Python stubs are alive, and their reload.

A model is watched while Triton's repository index says READY: every instance its config names (a Python model) and
every instance whose stub was seen must have a running one (a reload starts the new stub before the old one ends; an
instance a reload with a smaller count dropped is not in the config any more). A dead or stopped stub gets its model
unloaded (Triton then answers ``/v2/models/M/ready`` 400 and requests NOT_FOUND) and loaded again, in a thread; where
the model-control mode allows no reload, the server is restarted instead (``restart_server``).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from gert.errors import GertError
from gert_triton import stubs as stub_procs
from gert_triton.health import Health
from gert_triton.serve_policy import Attempts, Policy
from gert_triton.triton_args import Plan
from gert_triton.triton_http import TritonHTTP, instance_names, model_states


class ModelWatch:
    """The models of one server start after another (``reset`` at each start)."""

    def __init__(
        self,
        plan: Plan,
        policy: Policy,
        health: Health,
        log: Callable[[str], None],
        wake: Callable[[], None],
        restart_server: Callable[[str], None],
    ):
        self.plan, self.policy, self.health = plan, policy, health
        self.log, self.wake, self.restart_server = log, wake, restart_server
        self.client: Optional[TritonHTTP] = None
        self.generation = 0
        self.reload_attempts: Dict[str, Attempts] = {}
        self.desired: Set[str] = set()  # explicit mode (the user's): models to keep loaded
        self.done: "queue.Queue[Tuple[int, str, Optional[str]]]" = queue.Queue()
        self.reset(None, 0)

    def reset(self, client: Optional[TritonHTTP], generation: int) -> None:
        """A new server start: nothing of the last one's stubs or reloads applies."""
        self.client, self.generation = client, generation
        self.known: Dict[str, Dict[str, list]] = {}  # model -> instance -> stubs seen while it was ready
        self.expected: Dict[str, Optional[Set[str]]] = {}  # model -> instances its config names (while READY)
        self.reloading: Set[str] = set()
        self.given_up: Set[str] = set()  # models past max_reloads (until the server restarts)
        self.stubs: List[stub_procs.Stub] = []
        self.index_ok = time.monotonic()
        self.index_failures = 0

    def tick(self, server_pid: int) -> None:
        """One look at the server: the repository index, the stubs, and what to do about a model that is down."""
        try:
            index = self.client.index(timeout=3.0)
        except (OSError, GertError, ValueError):
            self.index_failures += 1
            if self.index_failures >= 3:
                self.health.update(phase="unresponsive")
            return
        self.index_ok, self.index_failures = time.monotonic(), 0
        states = model_states(index)
        running = stub_procs.stubs_of(server_pid)
        grouped = stub_procs.by_model(running)
        watched = self.watched(states)
        self.health.forget_models(keep=watched)
        for name in sorted(watched):
            state, reason = states.get(name, ("", ""))
            if name in self.reloading:
                self.health.set_model(name, state="reloading")
            elif state == "READY":
                self.check_stubs(name, grouped.get(name, {}))
            else:
                self.known.pop(name, None)
                self.expected.pop(name, None)
                self.health.set_model(
                    name, state="loading" if state == "LOADING" else "unavailable", stubs=0, reason=reason
                )
                if self.plan.control == "gert" and state not in ("LOADING", "UNLOADING"):
                    self.recover(name, f"not loaded ({state or 'never loaded'}{': ' + reason if reason else ''})")
        # published after the verdicts: until a dead stub's model reads "stub dead", the stub stays on the list a
        # probe checks, so no probe reads the old "ready" beside a list the dead stub already left
        self.stubs = running
        if self.health.phase in ("starting", "restarting", "unresponsive"):
            self.health.update(phase="serving")

    def watched(self, states: dict) -> Set[str]:
        """The models readiness waits for: every one of the repository in gert's mode and in none/poll mode;
        in the user's explicit mode those loaded (until the user unloads them)."""
        if self.plan.control == "gert":  # a model directory added later is not loaded, as in Triton's none mode
            return {name for name, (state, _) in states.items() if state}
        if self.plan.control != "explicit":
            return set(states)
        for name, (state, reason) in states.items():
            if state == "READY":
                self.desired.add(name)
            elif state == "UNAVAILABLE" and "unloaded" in reason and name not in self.reloading:
                self.desired.discard(name)
        for name in self.desired - set(states):
            self.desired.discard(name)
        for name in self.desired:  # after a restart: load again what was loaded before it
            if states.get(name, ("",))[0] not in ("READY", "LOADING") and name not in self.reloading:
                self.recover(name, "loaded before the server restarted")
        return set(self.desired)

    def expected_instances(self, name: str) -> Optional[Set[str]]:
        """The instances a READY Python model must have a running stub for, from its config (read once while it
        stays READY); None when it has no stubs (another backend, an ensemble) or the config is unclear (GPU
        groups, which gert does not write). A stub that died before the first look is found this way."""
        if name not in self.expected:
            try:
                config = self.client.config(name, timeout=3.0)
            except (OSError, GertError, ValueError):
                return None  # asked again at the next look
            groups = config.get("instance_group") or []
            python = config.get("backend") == "python"
            self.expected[name] = (
                instance_names(config)
                if python and groups and not any(g.get("kind") == "KIND_GPU" for g in groups)
                else None
            )
        return self.expected[name]

    def check_stubs(self, name: str, instances: Dict[str, list]) -> None:
        known = self.known.setdefault(name, {})
        known.update(instances)
        dead = {i for i in known if i not in instances}
        expected = self.expected_instances(name)
        if expected is not None:
            for i in [i for i in known if i not in expected]:
                known.pop(i, None)  # an instance a reload with a smaller count dropped is not dead
            dead = {i for i in expected if i not in instances}
        dead |= {i for i, ss in instances.items() if all(stub_procs.stopped(s) for s in ss)}
        if not dead:
            self.health.set_model(name, state="ready", stubs=sum(len(v) for v in instances.values()), reason="")
            return
        dead_list = ", ".join(sorted(dead))
        self.health.count(name, "stub_deaths")
        self.health.set_model(name, state="stub dead", reason=f"stub of {dead_list} died")
        stub_procs.kill([s for i in dead for s in instances.get(i, [])])
        self.recover(name, f"the Python stub of instance {dead_list} died")

    def recover(self, name: str, why: str) -> None:
        """Reload ``name`` in a thread (unload, so Triton too reports it not ready, then load), or restart the server
        where the model-control mode allows no reload."""
        self.known.pop(name, None)
        self.expected.pop(name, None)
        if not self.plan.can_reload:
            self.restart_server(f"model {name!r}: {why}, and --model-control-mode={self.plan.control} cannot reload it")
            return
        if name in self.given_up:
            self.health.set_model(name, state="unavailable")
            return
        attempts = self.reload_attempts.setdefault(name, Attempts(self.policy, self.policy.max_reloads))
        delay = attempts.next_delay()
        if delay is None:
            self.given_up.add(name)
            self.log(
                f"model {name!r}: {why}; {self.policy.max_reloads} reloads within "
                f"{self.policy.window_s:.0f} s already: it stays down"
            )
            self.health.set_model(name, state="unavailable", reason=f"gave up reloading: {why}")
            return
        self.reloading.add(name)
        self.health.set_model(name, state="reloading", reason=why)
        self.log(f"model {name!r}: {why}; reloading it" + (f" in {delay:.0f} s" if delay else ""))
        threading.Thread(
            target=self.reload,
            args=(name, delay, self.generation, self.client),
            daemon=True,
            name=f"gert-serve-reload-{name}",
        ).start()

    def reload(self, name: str, delay: float, generation: int, client: TritonHTTP) -> None:
        error = None
        try:
            try:
                client.unload(name)
            except GertError:
                pass  # not loaded any more (a failed load): load it all the same
            time.sleep(delay)
            client.load(name, timeout=self.policy.load_timeout_s)
        except (OSError, GertError) as e:
            error = str(e)
        self.done.put((generation, name, error))
        self.wake()

    def collect(self) -> None:
        """Results of the reload threads (of this server start)."""
        while True:
            try:
                generation, name, error = self.done.get_nowait()
            except queue.Empty:
                return
            if generation != self.generation:
                continue  # the server it reloaded on is gone
            self.reloading.discard(name)
            if error:
                self.log(f"model {name!r}: reload failed: {error}")
                self.health.set_model(name, state="unavailable", reason=f"reload failed: {error}")
            else:
                self.health.count(name, "reloads")
                self.log(f"model {name!r} reloaded")
