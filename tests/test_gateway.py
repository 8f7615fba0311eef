"""The OpenAI-compatible gateway and the Prometheus metrics of all three services, as real processes.

Draft service (shipped Eagle heads) + target (default model, speculative k=2) + gateway, each with its
metrics exporter; driven with the official ``openai`` package, plain HTTP (httpx) for the error objects,
and scraped with ``prometheus_client``'s parser.
"""

from __future__ import annotations

import time

import grpc
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import GatewayProcess, ServiceProcess, free_port, start_target
from client import TandemClient

KEY = "test-key"
MODEL = "default"
QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def stack(default_model_converted):
    draft_port, draft_metrics, target_metrics = free_port(), free_port(), free_port()
    drafter = ServiceProcess(
        "draft_service",
        ["--mode", "eagle", "--num-draft-tokens", "2", "--metrics-port", str(draft_metrics)],
        draft_port,
    )
    drafter.wait_serving()
    target = start_target(
        "--drafter", "grpc", "--draft-address", f"127.0.0.1:{draft_port}", "--draft-mode", "eagle",
        "--num-draft-tokens", "2", "--max-slots", "2", "--max-seq-len", "1024", "--max-batch-tokens", "64",
        "--draft-deadline-ms", "5000", "--metrics-port", str(target_metrics),
    )  # fmt: skip
    with TandemClient(target.address) as c:
        deadline = time.monotonic() + 60
        while not c.model_info().drafter_status.attached:
            assert time.monotonic() < deadline, target.logs()
            time.sleep(0.2)
    gateway = GatewayProcess(target.address, "--api-key", KEY)
    yield {
        "gateway": gateway,
        "target": target,
        "target_metrics": f"http://127.0.0.1:{target_metrics}/metrics",
        "draft_metrics": f"http://127.0.0.1:{draft_metrics}/metrics",
    }
    gateway.stop()
    target.stop()
    drafter.stop()


@pytest.fixture()
def oai(stack):
    return openai.OpenAI(base_url=stack["gateway"].url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exporter: (name, sorted labels) -> value."""
    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def delta(after: dict, before: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_models_lists_the_served_model(oai):
    assert [m.id for m in oai.models.list().data] == [MODEL]


def test_chat_whole_and_streamed_agree_with_usage_and_stats(oai):
    whole = oai.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=24)
    assert whole.choices[0].message.role == "assistant" and whole.choices[0].message.content
    assert whole.usage.completion_tokens <= 24 and whole.usage.prompt_tokens > 0
    stats = whole.model_extra["tandem"]
    assert stats["num_steps"] >= 1 and stats["acceptance_mode"].startswith("greedy")

    chunks = list(
        oai.chat.completions.create(
            model=MODEL, messages=QUESTION, temperature=0, max_tokens=24, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content  # greedy: same text streamed or not
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_with_a_stop_string_streamed_and_not(oai):
    prompt = "Count: one, two, three, four, five, six,"
    free = oai.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16)
    words = free.choices[0].text.split()
    assert len(words) >= 2, free.choices[0].text
    stop = words[1]
    cut = oai.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].text and free.choices[0].text.startswith(cut.choices[0].text)
    streamed = oai.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16, stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text


def test_bad_parameters_are_openai_errors(oai, stack):
    with pytest.raises(openai.BadRequestError, match="n=2"):
        oai.chat.completions.create(model=MODEL, messages=QUESTION, n=2)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        oai.chat.completions.create(model=MODEL, messages=QUESTION, temperature=5)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        oai.chat.completions.create(model="gpt-4o", messages=QUESTION)
    wrong_key = openai.OpenAI(base_url=stack["gateway"].url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong_key.models.list()


def test_error_objects_over_plain_http(stack):
    url = stack["gateway"].url + "/v1/chat/completions"
    auth = {"Authorization": f"Bearer {KEY}"}
    cases = [
        ({"model": MODEL, "messages": []}, 400, "messages"),  # schema
        ({"model": MODEL, "messages": QUESTION, "presence_penalty": 1}, 400, "presence_penalty"),  # unsupported
        ({"model": MODEL, "messages": QUESTION, "max_tokens": 5000}, 400, None),  # the target's INVALID_ARGUMENT
    ]
    for body, status, param in cases:
        r = httpx.post(url, json=body, headers=auth, timeout=60)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error" and error["param"] == param
    r = httpx.post(url, json={"model": MODEL, "messages": QUESTION}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"


def test_a_dropped_stream_aborts_and_frees_its_slot(oai, stack):
    before = scrape(stack["target_metrics"])
    stream = oai.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=600, stream=True, extra_body={"ignore_eos": True}
    )
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    deadline = time.monotonic() + 90
    while True:
        after = scrape(stack["target_metrics"])
        if delta(after, before, "tandem_requests_total", finish_reason="aborted") == 1:
            break
        seen = {k: v for k, v in after.items() if "requests_total" in k[0] or "slots" in k[0]}
        assert time.monotonic() < deadline, f"the target never aborted the dropped stream: {seen}"
        time.sleep(0.2)
    assert after[("tandem_kv_slots_used", ())] == 0
    assert delta(after, before, "tandem_generation_tokens_total") < 600


def test_metrics_of_all_three_services_move_by_the_right_amounts(oai, stack):
    before = {k: scrape(stack[k]) for k in ("target_metrics", "draft_metrics")}
    before_gw = scrape(stack["gateway"].url + "/metrics")
    answer = oai.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=32, extra_body={"ignore_eos": True}
    )
    stats = answer.model_extra["tandem"]
    target = scrape(stack["target_metrics"])
    t0 = before["target_metrics"]
    assert delta(target, t0, "tandem_requests_total", finish_reason="length") == 1
    assert delta(target, t0, "tandem_generation_tokens_total") == 32
    assert delta(target, t0, "tandem_prompt_tokens_total") == answer.usage.prompt_tokens
    assert delta(target, t0, "tandem_spec_decode_num_steps_total") == stats["num_steps"]
    assert delta(target, t0, "tandem_spec_decode_num_draft_tokens_total") == stats["num_drafted"] > 0
    assert delta(target, t0, "tandem_spec_decode_num_accepted_tokens_total") == stats["num_accepted"]
    for j, accepted in enumerate(stats["accepted_per_position"]):
        assert delta(target, t0, "tandem_spec_decode_num_accepted_tokens_per_pos_total", position=str(j)) == accepted
    assert delta(target, t0, "tandem_time_to_first_token_seconds_count") == 1
    assert delta(target, t0, "tandem_e2e_request_latency_seconds_count") == 1
    assert delta(target, t0, "tandem_draft_round_trip_seconds_count") >= stats["num_steps"]
    assert target[("tandem_draft_link_attached", ())] == 1
    assert target[("tandem_spec_decode_mean_acceptance_length", ())] >= 1
    # the full collection before the start-up objects were frozen was counted (a request may run none)
    assert target[("tandem_gc_collections_total", (("generation", "2"),))] >= 1

    draft = scrape(stack["draft_metrics"])
    d0 = before["draft_metrics"]
    # the drafter is called before every step that verifies drafts (a step choosing none sends nothing)
    assert delta(draft, d0, "tandem_draft_steps_total") >= stats["drafted_per_position"][0] > 0
    assert delta(draft, d0, "tandem_draft_tokens_total") >= stats["num_drafted"]
    assert draft[("tandem_draft_session_attached", ())] == 1
    assert draft[("tandem_gc_collections_total", (("generation", "2"),))] >= 1
    assert draft[("tandem_gc_pause_max_seconds", (("generation", "2"),))] > 0

    gateway = scrape(stack["gateway"].url + "/metrics")
    assert delta(gateway, before_gw, "tandem_gateway_requests_total", path="/v1/chat/completions", status="200") == 1
    assert delta(gateway, before_gw, "tandem_gateway_time_to_first_token_seconds_count") == 1


def test_requests_refused_before_parsing_are_counted(stack):
    """Oversized and undecodable gRPC requests never reach a handler but still count as rejected."""
    before = scrape(stack["target_metrics"])
    with grpc.insecure_channel(stack["target"].address) as channel:
        call = channel.unary_unary("/mtp.v1.TargetService/Generate", request_serializer=bytes)
        for body in (b"\x0a" + b"\xff" * 64, b"\x0a\x83\x80\x40" + b"x" * (1 << 20)):  # garbage; 1 MB of prompt
            with pytest.raises(grpc.RpcError) as err:
                call(body, timeout=30)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    after = scrape(stack["target_metrics"])
    assert delta(after, before, "tandem_requests_rejected_total", code="INVALID_ARGUMENT") == 2
