"""Requests the target writes itself: more distinct prompts for distillation than the Spec-Bench split holds.

Each (category, topic) seed asks the target, sampled, for the raw material of a request shaped like
that Spec-Bench category (a German sentence to translate, a news report to summarise, a passage with
a question, a word problem...); the request is then answered like any other prompt. The seeds are the
project's own; no request text comes from the benchmark, so nothing held out leaks in.
"""

from __future__ import annotations

from collections.abc import Callable

from bench import spec_bench
from training.distill import Job

SELF_PROMPT_ID = 1_000_000  # question ids of self-written requests start here (never a Spec-Bench id)

# category -> (what the target is asked to write, how the written text becomes the user's request)
ASKS: dict[str, tuple[str, str]] = {
    "mt_bench": (
        "Write one request that a user might send to an AI assistant about {topic}. Write only the request.",
        "{text}",
    ),
    "translation": (
        "Write one sentence in German about {topic}. Write only the German sentence.",
        "Translate German to English: {text}",
    ),
    "summarization": ("Write a short news report about {topic}.", "Summarize: {text}"),
    "qa": ("Write one short trivia question about {topic}. Write only the question.", "{text}"),
    "math_reasoning": (
        "Write one short math word problem about {topic} that uses numbers. Write only the problem.",
        "{text}",
    ),
    "rag": (
        "Write a paragraph of facts about {topic}.",
        "{text}\n\nAccording to the passage above, what are the main points about {topic}?",
    ),
}

TOPICS = (
    "cooking pasta",
    "a train journey",
    "saving money",
    "the solar system",
    "a football match",
    "gardening",
    "a new smartphone",
    "climate change",
    "a job interview",
    "learning a language",
    "a birthday party",
    "the human heart",
    "electric cars",
    "a mountain hike",
    "ancient Rome",
    "a city library",
    "coffee",
    "a rainy weekend",
    "photosynthesis",
    "online shopping",
    "a school science fair",
    "the ocean",
    "chess",
    "a hospital visit",
    "renewable energy",
    "a music festival",
    "dogs",
    "the stock market",
    "volcanoes",
    "a bakery",
    "space travel",
    "recycling",
    "a wedding",
    "computer programming",
    "a museum",
    "bicycles",
    "the Olympic Games",
    "a farmers market",
    "sleep",
    "a small business",
    "earthquakes",
    "painting",
    "a flight delay",
    "vitamins",
    "a road trip",
    "the moon",
    "a local election",
    "honey bees",
)

GenerateFn = Callable[..., list[list[int]]]  # (model, prompts, max_new, temperature, seed, pad=, eos=) -> ids up to eos


def seeds(samples: int, topics: int = 0) -> list[tuple[str, str]]:
    """(category, topic) for every request to write: each pair ``samples`` times (the first ``topics`` only)."""
    return [(c, t) for c in ASKS for t in TOPICS[: topics or None] for _ in range(samples)]


def request_text(category: str, topic: str, written: str) -> str:
    return ASKS[category][1].format(text=written.strip(), topic=topic)


def self_prompt_jobs(
    model,
    tokenizer,
    samples: int,
    temperature: float,
    seed: int,
    generate: GenerateFn,
    topics: int = 0,
    max_written: int = 160,
) -> list[Job]:
    """Jobs answering requests the target wrote; empty writings are dropped."""
    from target_service.tokenizer import chat_prompt_ids

    todo = seeds(samples, topics)
    asks = [chat_prompt_ids(tokenizer, [{"role": "user", "content": ASKS[c][0].format(topic=t)}]) for c, t in todo]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    written = generate(model, asks, max_written, temperature, seed, pad=pad, eos=tokenizer.eos_token_id)
    jobs = []
    for n, ((category, topic), ids) in enumerate(zip(todo, written)):
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        if not text:
            continue
        qid = SELF_PROMPT_ID + n
        prompt = spec_bench.Prompt(-1, qid, category, request_text(category, topic, text))
        jobs.append(Job(f"self{qid}", prompt, (("user", prompt.text),)))
    return jobs
