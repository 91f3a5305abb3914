"""The component graph: load a config, order components by their references, evaluate
them in dependency order, and re-evaluate dependents whenever a component's exports change."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from ..errors import ConfigError
from .component import NOT_IMPLEMENTED_PREFIXES, REGISTRY, Component
from .schema import decode
from .syntax import parse
from .syntax.ast import Block, body_references
from .syntax.errors import AlloySyntaxError
from .syntax.eval import Evaluator
from .syntax.stdlib import build as build_stdlib

log = logging.getLogger("hotstack.agent")

# Top-level configuration blocks of Alloy that are not components; accepted and ignored
# with a warning only when they hold nothing hotstack would need.
_SERVICE_BLOCKS = {"logging", "tracing", "livedebugging", "http"}


@dataclass
class Node:
    block: Block
    component: Component
    deps: set[str]


class Controller:
    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.order: list[str] = []
        self.stdlib = build_stdlib()
        self.warnings: list[str] = []
        self.running = False
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._eval_lock = threading.RLock()
        self.metrics_registry = None   # set by the agent: a prometheus_client CollectorRegistry
        self.services: dict[str, object] = {}   # shared helpers by name (e.g. the local profile store)
        self.stop_deadline: float | None = None  # monotonic; set when the agent stops

    # -- loading ------------------------------------------------------------------------------
    def load_text(self, text: str, filename: str) -> None:
        self.load(parse(text, filename))

    def load(self, body) -> None:
        for attr in body.attributes:
            raise AlloySyntaxError(attr.pos, f"unexpected attribute {attr.name!r} at the top level "
                                         "(only component blocks are allowed here)")
        for block in body.blocks:
            if block.name in _SERVICE_BLOCKS and not block.label:
                self.warn(f"{block.pos}: the {block.name!r} block is ignored by hotstack")
                continue
            cls = REGISTRY.get(block.name)
            if cls is None:
                if block.name.startswith(NOT_IMPLEMENTED_PREFIXES):
                    have = ", ".join(sorted(n for n in REGISTRY if not n.startswith("hotstack.")))
                    raise AlloySyntaxError(block.pos, f"component {block.name!r} is not implemented by hotstack "
                                                  f"(available: {have})")
                raise AlloySyntaxError(block.pos, f"unknown component {block.name!r}")
            if not block.label:
                raise AlloySyntaxError(block.pos, f"component {block.name!r} must have a label, "
                                              f"e.g. {block.name} \"default\" {{ ... }}")
            node_id = block.id
            if node_id in self.nodes:
                raise AlloySyntaxError(block.pos, f"component {node_id!r} is declared more than once "
                                              f"(first at {self.nodes[node_id].block.pos})")
            self.nodes[node_id] = Node(block, cls(self, block.label), set())
        namespaces = {n.split(".")[0] for n in REGISTRY} | {i.split(".")[0] for i in self.nodes}
        for node_id, node in self.nodes.items():
            for parts, pos in body_references(node.block.body):
                if parts[0] in self.stdlib and parts[0] not in namespaces:
                    continue
                target = self._resolve(parts)
                if target is None:
                    if parts[0] in self.stdlib:
                        continue
                    if parts[0] in namespaces:
                        raise AlloySyntaxError(pos, f"component {'.'.join(parts[:-1] or parts)!r} does not exist "
                                                f"(referenced as {'.'.join(parts)})")
                    raise AlloySyntaxError(pos, f"identifier {parts[0]!r} does not exist")
                if target == node_id:
                    raise AlloySyntaxError(pos, f"{node_id} refers to itself")
                node.deps.add(target)
        self.order = self._topological_order()

    def _resolve(self, parts: list[str]) -> str | None:
        for n in range(len(parts), 1, -1):
            candidate = ".".join(parts[:n])
            if candidate in self.nodes:
                return candidate
        return None

    def _topological_order(self) -> list[str]:
        order: list[str] = []
        state: dict[str, int] = {}   # 1 = visiting, 2 = done

        def visit(node_id: str, path: list[str]) -> None:
            if state.get(node_id) == 2:
                return
            if state.get(node_id) == 1:
                cycle = path[path.index(node_id):] + [node_id]
                raise AlloySyntaxError(self.nodes[node_id].block.pos, "cycle between components: " + " -> ".join(cycle))
            state[node_id] = 1
            for dep in sorted(self.nodes[node_id].deps):
                visit(dep, path + [node_id])
            state[node_id] = 2
            order.append(node_id)

        for node_id in self.nodes:
            visit(node_id, [])
        return order

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    # -- evaluation ---------------------------------------------------------------------------
    def scope(self) -> dict:
        scope: dict = dict(self.stdlib)
        for node_id, node in self.nodes.items():
            parts = node_id.split(".")
            at = scope
            for p in parts[:-1]:
                nxt = at.get(p)
                if not isinstance(nxt, dict):
                    nxt = {}
                    at[p] = nxt
                elif at is scope and p in self.stdlib:
                    nxt = dict(nxt)   # never mutate the stdlib namespaces
                    at[p] = nxt
                at = nxt
            at[parts[-1]] = node.component.exports
        return scope

    def evaluate(self, node_id: str) -> None:
        """Decode one component's arguments against current exports and apply them."""
        node = self.nodes[node_id]
        with self._eval_lock:
            args = decode(node.component.schema, node.block.body, Evaluator(self.scope()), node_id,
                          node.block.pos, warn=self.warn)
            try:
                node.component.update(args)
            except ValueError as e:
                raise AlloySyntaxError(node.block.pos, f"{node_id}: {e}") from None

    def evaluate_all(self) -> None:
        """First evaluation, in dependency order: any error is a config error (exit 2). Every
        component is tried (those that read a failed one are skipped), so that one run of
        --validate lists every error, one line each."""
        errors: list[str] = []
        failed: set[str] = set()
        for node_id in self.order:
            if self.nodes[node_id].deps & failed:
                failed.add(node_id)
                continue
            try:
                self.evaluate(node_id)
            except ConfigError as e:
                errors.append(str(e))
                failed.add(node_id)
        if errors:
            raise ConfigError("\n".join(errors))

    def exports_changed(self, component: Component) -> None:
        if self.running:
            self._queue.put(component.id)

    def dependents(self, node_id: str) -> list[str]:
        """Every component that reads node_id, directly or not, in evaluation order."""
        affected = {node_id}
        out = []
        for nid in self.order:
            if nid != node_id and self.nodes[nid].deps & affected:
                affected.add(nid)
                out.append(nid)
        return out

    def _reevaluate_loop(self) -> None:
        while True:
            node_id = self._queue.get()
            if node_id is None:
                return
            for dep in self.dependents(node_id):
                comp = self.nodes[dep].component
                try:
                    self.evaluate(dep)
                except ConfigError as e:
                    comp.eval_error = str(e)
                    comp.set_health("unhealthy", str(e))   # keeps its last good arguments
                except Exception as e:  # a component bug must not stop the graph
                    comp.eval_error = f"evaluation failed: {e}"
                    comp.set_health("unhealthy", comp.eval_error)
                else:
                    if comp.eval_error:   # only clear what evaluation itself reported
                        comp.eval_error = ""
                        comp.set_health("healthy", "component evaluated")

    # -- running ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start components in dependency order; a component that cannot start is a one-line error."""
        self.running = True
        self._worker = threading.Thread(target=self._reevaluate_loop, name="hotstack-graph", daemon=True)
        self._worker.start()
        for node_id in self.order:
            comp = self.nodes[node_id].component
            comp.start()
            if comp.health.state == "unknown":
                comp.set_health("healthy", "started")

    def flush_time_left(self, default: float) -> float:
        """What a stopping component may still spend flushing: the agent's one flush deadline,
        shared by every component, counts from the start of the stop."""
        if self.stop_deadline is None:
            return default
        return max(0.2, self.stop_deadline - time.monotonic())

    def stop(self, flush_deadline_s: float | None = None) -> None:
        if flush_deadline_s is not None:
            self.stop_deadline = time.monotonic() + flush_deadline_s
        self.running = False
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout=5)
        for node_id in reversed(self.order):
            started = time.monotonic()
            try:
                self.nodes[node_id].component.stop()
            except Exception as e:   # stopping must reach every component
                log.warning("%s: stop failed: %s", node_id, e)
            log.debug("%s: stopped in %.2fs", node_id, time.monotonic() - started)

    # -- reloading (SIGHUP, /-/reload) ------------------------------------------------------------
    def reload(self, text: str, filename: str) -> dict[str, list[str]]:
        """Apply a new config to the running graph, as Alloy does on SIGHUP: the new text is
        parsed, ordered and evaluated on its own first (what --validate does), so a bad file
        raises ConfigError and changes nothing. Then the diff is applied: components no longer
        declared are stopped, new ones created and started, kept ones (same id) re-evaluated
        with their new arguments while they run."""
        from . import components  # noqa: F401  (registers the components)
        candidate = Controller()
        candidate.load_text(text, filename)
        candidate.evaluate_all()
        with self._eval_lock:
            removed = [n for n in reversed(self.order) if n not in candidate.nodes]
            for node_id in removed:
                comp = self.nodes[node_id].component
                try:
                    comp.stop()
                except Exception as e:   # a removed component must not keep the graph from changing
                    log.warning("%s: stop failed: %s", node_id, e)
                self.services = {k: v for k, v in self.services.items() if v is not comp}
            nodes: dict[str, Node] = {}
            added: list[str] = []
            for node_id, fresh in candidate.nodes.items():
                node = self.nodes.get(node_id)
                if node is None:
                    node = Node(fresh.block, type(fresh.component)(self, fresh.component.label), fresh.deps)
                    added.append(node_id)
                else:
                    node.block, node.deps = fresh.block, fresh.deps
                nodes[node_id] = node
            self.nodes, self.order = nodes, list(candidate.order)
            self.warnings = candidate.warnings
            # Every component against the live exports of the others, in dependency order.
            for node_id in self.order:
                comp = self.nodes[node_id].component
                try:
                    self.evaluate(node_id)
                except ConfigError as e:
                    comp.eval_error = str(e)
                    comp.set_health("unhealthy", str(e))
                else:
                    if comp.eval_error:
                        comp.eval_error = ""
                        comp.set_health("healthy", "component evaluated")
            for node_id in self.order:
                if node_id in added:
                    comp = self.nodes[node_id].component
                    comp.start()
                    if comp.health.state == "unknown":
                        comp.set_health("healthy", "started")
        kept = [n for n in self.order if n not in added]
        return {"added": added, "removed": removed, "kept": kept}

    def components(self) -> list[Component]:
        return [self.nodes[n].component for n in self.order]

    def component(self, node_id: str) -> Component | None:
        node = self.nodes.get(node_id)
        return node.component if node else None


def load_config(text: str, filename: str, registry=None) -> Controller:
    """Parse, build the graph and evaluate every component once (what --validate does)."""
    from . import components  # noqa: F401  (registers the components)
    controller = Controller()
    controller.metrics_registry = registry
    controller.load_text(text, filename)
    controller.evaluate_all()
    return controller
