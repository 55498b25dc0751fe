"""The API past one machine: two replicas of the toy pair behind a local Ray Serve (`-m ray`).

The tests that need Ray start one local instance for the module (about 15 s on two cores) and are skipped
where Ray Serve is not installed (`pip install '.[ray]'`); the first few need no Ray at all. The replicas
write slowly (a pause after each event, `slow_service`), so a request is still running, or waiting for a
replica's slot, when a replica is killed. The API asks for a key (`KEY`), which the replicas read from the
environment the local Ray was started in, as a node's would be: every request sends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

import httpx
import pytest

from cascade import ModelConfig
from cascade.api import protocol
from cascade.api.gateway import APP_NAME, KEY_VARIABLE, Gateway, models_state, with_key
from cascade.api.replicas import Scaling, app_builder
from cascade.api.server import ApiSettings

from .helpers import ROOT, engine_for, free_port

MAX_TOKENS = 24
KEY = "test-key-not-in-any-argument"
AUTH = {"Authorization": f"Bearer {KEY}"}


# ---- without Ray --------------------------------------------------------------------------------------

@pytest.mark.parametrize("replicas, expected", [("2", (2, 2)), ("1:4", (1, 4)), ("3:3", (3, 3))])
def test_replicas_are_n_or_min_max(replicas, expected):
    scaling = Scaling.parse(replicas)
    assert (scaling.min_replicas, scaling.max_replicas) == expected


@pytest.mark.parametrize("replicas", ["0", "3:2", "many", "1:x"])
def test_a_bad_replica_count_is_refused_in_words(replicas):
    with pytest.raises(ValueError, match="--replicas"):
        Scaling.parse(replicas)


def test_a_replica_takes_as_many_requests_as_its_slots_run_and_as_many_again_waiting():
    config = ModelConfig(parallel=3, n_threads=2)
    fixed = Scaling.parse("2").options(config)
    assert fixed["num_replicas"] == 2 and fixed["max_ongoing_requests"] == 6
    assert fixed["ray_actor_options"] == {"num_cpus": 2} and "autoscaling_config" not in fixed
    scaled = Scaling.parse("1:4", replica_cpus=0.5).options(config)
    assert scaled["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 3}
    assert scaled["ray_actor_options"] == {"num_cpus": 0.5} and "num_replicas" not in scaled


def test_a_config_files_builder_takes_only_its_own_arguments():
    with pytest.raises(ValueError, match="replicas, target_ongoing and replica_cpus"):
        app_builder({"replica": "2"})


def test_a_replicas_health_check_fails_with_the_load_error_until_its_models_are_loaded(toy):
    from cascade.api.replicas import Models
    from cascade.engine.models import ModelError
    from cascade.serving.service import EngineService

    def missing(config, progress):
        raise ModelError("draft model file not found: small.gguf")

    replica = Models.__new__(Models)  # its constructor loads; here the service is given
    replica.service = EngineService(ModelConfig(draft="small.gguf", target="large.gguf"), loader=missing)
    with pytest.raises(ModelError):
        replica.service.engines()
    with pytest.raises(RuntimeError, match="failed to load: draft model file not found: small.gguf"):
        replica.check_health()
    replica.service = EngineService(ModelConfig(draft=str(toy.small), target=str(toy.related), n_ctx=512),
                                    warm=lambda engine: None)
    replica.service.engines()
    replica.check_health()  # loaded: healthy


def example_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "examples" / "ray-serve.yaml").read_text(encoding="utf-8"))


def test_the_config_file_example_builds_this_application_with_the_default_models():
    (app,) = example_config()["applications"]
    assert app["import_path"] == "cascade.api.replicas:app_builder" and Scaling.parse(app["args"]["replicas"])
    env = app["runtime_env"]["env_vars"]
    assert (env["CASCADE_DRAFT"], env["CASCADE_TARGET"]) == (ModelConfig().draft, ModelConfig().target)


@pytest.mark.ray
def test_the_config_file_example_is_one_ray_serve_takes():
    schema = pytest.importorskip("ray.serve.schema", reason="the Ray tier: needs Ray Serve (pip install '.[ray]')")
    schema.ServeDeploySchema.model_validate(example_config())


def test_the_load_bench_counts_an_answer_no_server_gave_as_lost_with_its_reason():
    from lab.api_load import run_load

    load = run_load(f"http://127.0.0.1:{free_port()}", concurrency=2, requests=3)
    assert len(load.streams) == 3 and len(load.lost) == 3 and "ConnectError" in load.lost[0].lost
    assert load.replicas() == {} and "3 lost" in load.lines()[0]


def test_nothing_imports_ray_and_serve_ray_without_it_says_how_to_install_it():
    script = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
              "import cascade.cli, cascade.cli.serve, cascade.api.replicas\n"
              "from cascade.cli import main\n"
              "sys.exit(main(['serve', '--ray']))")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'cascade-decoding[ray]'" in r.stderr and "Traceback" not in r.stderr


def test_a_replica_takes_the_key_from_its_environment_and_will_not_start_without_one_it_was_built_with():
    api = ApiSettings(queue=3)  # as `build` binds it: no key
    assert with_key(api, keyed=True, env={KEY_VARIABLE: KEY}) == ApiSettings(api_key=KEY, queue=3)
    assert with_key(api, keyed=False, env={}) == api  # built without a key, none here: open, as `serve` is
    assert with_key(api, keyed=False, env={KEY_VARIABLE: KEY}).api_key == KEY  # a node's key is always kept
    with pytest.raises(RuntimeError, match=f"{KEY_VARIABLE} is not set where this replica runs"):
        with_key(api, keyed=True, env={})


def serve_status(status: str, running: int, message: str = "") -> SimpleNamespace:
    """What `serve.status()` says of an application `cascade` whose Models deployment is in `status`."""
    models = SimpleNamespace(status=SimpleNamespace(value=status), replica_states={"RUNNING": running} if running
                             else {"STARTING": 1}, message=message)
    return SimpleNamespace(applications={APP_NAME: SimpleNamespace(deployments={"Models": models})})


def test_the_gateways_health_is_ok_while_any_replica_runs_and_says_why_none_does():
    assert models_state(serve_status("HEALTHY", 2), APP_NAME) == ("ok", "")
    assert models_state(serve_status("UNHEALTHY", 1), APP_NAME) == ("ok", "")  # one of two replaced: one answers
    assert models_state(serve_status("UPDATING", 0), APP_NAME) == ("loading", "")
    assert models_state(SimpleNamespace(applications={}), APP_NAME) == ("loading", "")
    failed = serve_status("DEPLOY_FAILED", 0, "Traceback ...\ncascade.engine.models.ModelError: draft model file "
                                              "not found: /srv/models/small.gguf")
    assert models_state(failed, APP_NAME) == ("error", "no replica is running: draft model file not found: small.gguf")


class NoReplicas:
    """A `Models` handle that fails the test if the gateway sends it anything."""

    def options(self, **_kwargs):
        raise AssertionError("the gateway sent a request it answers itself on to a replica")


def test_the_gateway_answers_health_the_model_list_and_preflights_itself_with_the_replicas_key_rules(toy, monkeypatch):
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    flags = {"draft": str(toy.small), "target": str(toy.related)}
    gateway = Gateway(NoReplicas(), ApiSettings(cors=("https://chat.example",)), flags, keyed=True)
    states = iter([("loading", ""), ("ok", "")])
    gateway.read_state = lambda: next(states, ("ok", ""))
    reads: list[str] = []

    async def calls() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=gateway.__serve_build_asgi_app__())
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            first = await client.get("/health")  # no replica known to run: waits for a reading ("loading")
            then = await client.get("/v1/health")  # still none known: a reading again ("ok")
            gateway.read_state = lambda: reads.append("read") or ("ok", "")  # from here, the last reading answers
            return [first, then, await client.get("/v1/models"),
                    await client.get("/v1/models", headers=AUTH),
                    await client.options("/v1/chat/completions", headers={
                        "Origin": "https://chat.example", "Access-Control-Request-Method": "POST"})]

    # In a thread of its own: a browser test's sync Playwright may hold a running event loop in this one.
    with ThreadPoolExecutor(1) as thread:
        loading, health, refused, models, preflight = thread.submit(asyncio.run, calls()).result(timeout=60)
    assert not reads  # a replica known to run: nothing waited for Serve (its next reading is STATE_REFRESH_S away)
    assert loading.status_code == 503 and loading.json()["status"] == "loading" and loading.headers["retry-after"]
    assert health.status_code == 200 and health.json() == {"status": "ok"}  # open, as `serve`'s /health is
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert [m["id"] for m in models.json()["data"]] == protocol.offered_models()
    assert models.json()["data"][0]["cascade"]["target"] == toy.related.name
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://chat.example"


# ---- on a local Ray -----------------------------------------------------------------------------------

def slow_service(pause_s: float):
    """What builds a replica's EngineService: one whose engines pause after each event. Defined in a
    function, so that Ray's pickling carries it by value (the replicas cannot import the tests)."""

    def build(config):
        from contextlib import contextmanager

        from cascade.serving.service import EngineService

        class Slow:
            def __init__(self, engine) -> None:
                self.engine = engine

            def __getattr__(self, name):
                return getattr(self.engine, name)

            def generate(self, *args, **kwargs):
                for event in self.engine.generate(*args, **kwargs):
                    yield event
                    time.sleep(pause_s)

        class SlowService(EngineService):
            @contextmanager
            def lease(self, *args, **kwargs):  # whatever the lease takes (a progress callback, whose turn it is)
                with super().lease(*args, **kwargs) as engine:
                    yield Slow(engine)

        return SlowService(config)

    return build


TOY_FLAGS = {"n_threads": 1, "n_ctx": 512, "parallel": 1}


@pytest.fixture(scope="module")
def cluster(toy):
    """Two replicas of the toy pair (one slot each) on a local Ray started with the key in its environment (as
    `serve --ray` starts one, and as a node would have it); yields the proxy's URL."""
    pytest.importorskip("ray.serve", reason="the Ray tier: needs Ray Serve (pip install '.[ray]')")
    import ray
    from ray import serve

    import cascade
    from cascade.api.replicas import build

    before = os.environ.get(KEY_VARIABLE)
    os.environ[KEY_VARIABLE] = KEY  # Ray's processes, and the replicas they start, inherit it
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"py_modules": [cascade]})
    finally:  # this process's other tests see the environment as it was
        if before is None:
            del os.environ[KEY_VARIABLE]
        else:
            os.environ[KEY_VARIABLE] = before
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # One slot a replica (the serving default is four), so that a replica holds one answer and one waiting
        # for its slot: the killed replica's waiting request is what is retried elsewhere.
        flags = {"draft": str(toy.small), "target": str(toy.related), **TOY_FLAGS}
        serve.run(build(flags, ApiSettings(api_key=KEY), Scaling(2, 2, replica_cpus=0), service=slow_service(0.02)),
                  name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@dataclass
class Answer:
    """One streamed answer as a client saw it."""

    replica: str = ""
    attempts: int = 0
    status: int = 0
    text: str = ""
    chunks: int = 0
    done: bool = False  # it ended with data: [DONE]
    error: dict = field(default_factory=dict)  # or with an error chunk
    started: threading.Event = field(default_factory=threading.Event)


def ask(url: str, prompt: str, max_tokens: int = MAX_TOKENS, answer: Answer | None = None) -> Answer:
    answer = answer or Answer()
    body = {"model": "cascade", "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
        answer.status, answer.replica = r.status_code, r.headers.get("x-cascade-replica", "")
        answer.attempts = int(r.headers.get("x-cascade-attempts", "0"))
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                answer.done = True
                continue
            chunk = json.loads(line[len("data: "):])
            if "error" in chunk:
                answer.error = chunk["error"]
                continue
            answer.chunks += 1
            answer.text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
            answer.started.set()
    return answer


@pytest.mark.ray
def test_the_apis_routes_answer_through_the_proxy_the_gateway_its_own_the_replicas_each_naming_itself(cluster):
    models = httpx.get(f"{cluster}/v1/models", headers=AUTH, timeout=30)
    assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == protocol.offered_models()
    assert "x-cascade-replica" not in models.headers  # the gateway's own answer
    health = httpx.get(f"{cluster}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok" and "x-cascade-replica" not in health.headers
    refused = httpx.post(f"{cluster}/v1/chat/completions", json={"model": "gpt-4", "messages": []}, headers=AUTH,
                         timeout=30)
    assert refused.status_code in (400, 404) and "error" in refused.json()
    assert refused.headers["x-cascade-replica"] and refused.headers["x-cascade-attempts"] == "1"


@pytest.mark.ray
def test_twenty_streams_at_once_all_finish_over_both_replicas_with_the_engines_own_texts(cluster, toy):
    prompts = [f"Tell me about animal number {i}." for i in range(20)]
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda p: ask(cluster, p), prompts))
    assert all(a.status == 200 and a.done and not a.error for a in answers), answers
    assert len({a.replica for a in answers}) == 2  # Ray's router spread them
    engine = engine_for(toy.small, toy.related, n_threads=1, n_ctx=512)
    for prompt, answer in zip(prompts, answers):
        request = protocol.chat_request({"model": "cascade", "max_tokens": MAX_TOKENS,
                                         "messages": [{"role": "user", "content": prompt}]})
        *_, summary = engine.generate(request.prompt, request.config, score=False)
        assert answer.text == summary.text  # no answer lost a token or took another's


@pytest.mark.ray
def test_a_client_that_leaves_frees_its_replicas_slot_at_once(cluster):
    """The proxy cancels the gateway's request, the gateway its replica's, and the app stops the generation:
    a left answer of 400 tokens (8 s at least, writing slowly) would otherwise hold its slot."""
    def leave(i: int) -> None:
        body = {"model": "cascade", "stream": True, "max_tokens": 400, "cascade": {"threshold": 1e6},
                "messages": [{"role": "user", "content": f"Go on and on, {i}."}]}
        with httpx.stream("POST", f"{cluster}/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
            chunks = 0
            for line in r.iter_lines():
                chunks += line.startswith("data: {")
                if chunks == 3:
                    return

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(leave, range(2)))
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: ask(cluster, f"Hi {i}.", 4), range(4)))
    assert all(a.done for a in answers) and time.monotonic() - started < 4.0


@pytest.mark.ray
def test_the_load_bench_sees_every_answer_and_both_replicas(cluster):
    from lab.api_load import run_load

    load = run_load(cluster, concurrency=6, requests=12, max_tokens=8, key=KEY)
    assert len(load.streams) == 12 and not load.lost and load.tokens_per_s > 0
    assert len(load.replicas()) == 2 and all(s.first_token_s is not None for s in load.streams)


@pytest.mark.ray
def test_health_and_the_model_list_answer_at_once_while_every_slot_is_busy_and_more_wait(cluster):
    """Each replica's calls count against its max_ongoing_requests (twice its one slot here): six long answers
    fill both replicas and two more wait in Ray's router. Sent on to a replica, /health and /v1/models would wait
    behind them all (8 s an answer at least); the gateway answers them itself, while every answer is still being
    written and the two waiting ones have not begun. Prints what each answer took (pytest -s shows it)."""
    stop = threading.Event()
    answers = [Answer() for _ in range(6)]

    def hold(i: int) -> None:
        """A long answer, read until `stop` (then the client leaves, which frees its slot at once)."""
        body = {"model": "cascade", "stream": True, "max_tokens": 400, "cascade": {"threshold": 1e6},
                "messages": [{"role": "user", "content": f"Go on and on, {i}."}]}
        with httpx.stream("POST", f"{cluster}/v1/chat/completions", json=body, headers=AUTH, timeout=90) as r:
            answers[i].replica = r.headers.get("x-cascade-replica", "")
            for line in r.iter_lines():
                answers[i].done |= line == "data: [DONE]"
                if line.startswith("data: {"):
                    answers[i].started.set()
                if stop.is_set():
                    return

    with ThreadPoolExecutor(len(answers)) as pool:
        holders = [pool.submit(hold, i) for i in range(len(answers))]
        try:
            deadline = time.monotonic() + 60
            while len({a.replica for a in answers if a.started.is_set()}) < 2:  # both replicas write
                assert time.monotonic() < deadline, "the long answers did not begin on both replicas"
                time.sleep(0.01)
            time.sleep(0.5)  # the other four reach Ray (each replica holds one more; two wait in the router)
            took: dict[str, list[float]] = {}
            for path in ["/health", "/v1/health", "/v1/models"] * 10:
                started = time.perf_counter()
                r = httpx.get(f"{cluster}{path}", headers=AUTH, timeout=60)
                took.setdefault(path, []).append(time.perf_counter() - started)
                assert r.status_code == 200, (path, r.text)
            still = [a for a in answers if not a.done]
            waiting = [a for a in answers if not a.started.is_set()]
        finally:
            stop.set()
            for holder in holders:
                holder.result(timeout=120)
    assert len(still) == 6 and len(waiting) == 4, answers  # nothing had to wait for a slot
    print("\nwith every slot busy and 4 more waiting: " + ", ".join(
        f"{path} median {statistics.median(t) * 1000:.0f} ms, max {max(t) * 1000:.0f} ms" for path, t in took.items()))


def bound_arguments(app) -> list:
    """Every argument an application's deployments are bound with (what Ray pickles and keeps for each)."""
    from ray.serve import Application

    deployment = app._bound_deployment
    out = []
    for arg in [*deployment.init_args, *deployment.init_kwargs.values()]:
        out += bound_arguments(arg) if isinstance(arg, Application) else [arg]
    return out


@pytest.mark.ray
def test_the_key_is_in_no_deployments_arguments_nor_in_serves_status_yet_every_route_but_health_asks_for_it(
        cluster, toy):
    from ray import cloudpickle, serve
    from ray.serve.context import _get_global_client

    from cascade.api.replicas import build

    flags = {"draft": str(toy.small), "target": str(toy.related), **TOY_FLAGS}
    arguments = bound_arguments(build(flags, ApiSettings(api_key=KEY), Scaling(2, 2, replica_cpus=0)))
    assert [a.api_key for a in arguments if isinstance(a, ApiSettings)] == ["", ""]  # Models' and Gateway's
    assert arguments.count(True) == 2  # each is told a key was set, to refuse to start without one
    assert KEY.encode() not in cloudpickle.dumps(arguments)
    # What `serve status` and `serve config` print (and the dashboard shows) is read from these details.
    assert KEY not in json.dumps(_get_global_client().get_serve_details(), default=str)
    assert KEY not in repr(serve.status())

    chat = {"model": "cascade", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi."}]}
    for path, send in [("/v1/models", lambda **kw: httpx.get(f"{cluster}/v1/models", timeout=60, **kw)),
                       ("/v1/chat/completions", lambda **kw: httpx.post(f"{cluster}/v1/chat/completions", json=chat,
                                                                       timeout=60, **kw))]:
        for headers in ({}, {"Authorization": "Bearer not-the-key"}):
            refused = send(headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", path
        assert send(headers=AUTH).status_code == 200, path
    assert httpx.get(f"{cluster}/health", timeout=60).status_code == 200  # open, as `serve`'s is


def replica_actor(replica: str):
    import ray

    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::") and a["name"].endswith(f"#{replica}")]
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace="serve")


@pytest.mark.ray
def test_a_killed_replica_is_replaced_its_waiting_requests_answered_elsewhere_its_stream_ended_in_words(cluster):
    import ray
    from ray import serve

    # Each replica runs one answer and holds one more waiting for its slot; the other four wait in Ray.
    answers = [Answer() for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(ask, cluster, f"Count to {i}.", 120, a) for i, a in enumerate(answers)]
        deadline = time.monotonic() + 30
        while not any(a.started.is_set() for a in answers):
            assert time.monotonic() < deadline, "no answer began"
            time.sleep(0.01)
        victim = next(a.replica for a in answers if a.started.is_set())
        ray.kill(replica_actor(victim), no_restart=True)
        for f in futures:
            f.result(timeout=90)  # none hangs, and none breaks the connection (httpx would raise)

    cut = [a for a in answers if a.error]
    assert cut and all(a.replica == victim and a.chunks > 0 and a.error["code"] == "replica_lost" for a in cut)
    finished = [a for a in answers if not a.error]
    assert all(a.done and a.replica != victim for a in finished), answers
    assert len(cut) + len(finished) == 8 and any(a.attempts == 2 for a in finished), answers  # one was retried

    deadline = time.monotonic() + 90  # Ray starts a replica in its place
    while serve.status().applications[APP_NAME].deployments["Models"].replica_states.get("RUNNING") != 2:
        assert time.monotonic() < deadline, "the killed replica was not replaced"
        time.sleep(0.5)
    # Both replicas answer again, the new one in the killed one's place: asked a few at a time (one at a time,
    # Ray's router may send every request to the same idle replica), until both have answered or a minute passed.
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    with ThreadPoolExecutor(4) as pool:
        while len(seen) < 2 and time.monotonic() < deadline:
            seen |= {a.replica for a in pool.map(lambda i: ask(cluster, f"Hello {i}.", 4), range(4))}
    assert victim not in seen and len(seen) == 2, seen


@pytest.mark.ray
def test_replicas_whose_models_cannot_load_fail_the_deployment_with_the_reason(cluster):
    """Ray retries a replica whose constructor fails (3 times), then marks the deployment failed; its
    status keeps the replica's error, which `serve --ray` prints."""
    from ray import serve

    from cascade.api.replicas import build, failure

    flags = {"draft": "/no/such/draft.gguf", "target": "/no/such/target.gguf", "n_threads": 1}
    with pytest.raises(RuntimeError):
        serve.run(build(flags, ApiSettings(), Scaling(1, 1, replica_cpus=0)), name="broken", route_prefix="/broken")
    try:
        assert "Models: cascade.engine.models.ModelError: draft model file not found: /no/such/draft.gguf" in \
            failure("broken")
    finally:
        serve.delete("broken")
