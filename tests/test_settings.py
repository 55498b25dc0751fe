"""Settings: one function reads them for the command line and the page (flag > environment > default)."""

from __future__ import annotations

import argparse

import pytest

from cascade.engine.config import ModelConfig
from cascade.serving.settings import SERVING_DEFAULTS, add_model_flags, model_config, model_flags

from .helpers import cascade, json_lines


def test_a_flag_wins_over_the_environment_which_wins_over_the_default():
    env = {"CASCADE_DRAFT": "env/draft/d.gguf", "CASCADE_THREADS": "3", "CASCADE_N_CTX": " "}
    config = model_config({"target": "flag.gguf", "n_threads": None}, env=env)
    assert (config.draft, config.target, config.n_threads) == ("env/draft/d.gguf", "flag.gguf", 3)
    assert config.n_ctx == ModelConfig().n_ctx  # a blank variable is not set
    assert model_config(env={}) == ModelConfig()


def test_a_variable_that_is_not_a_number_is_named():
    with pytest.raises(ValueError, match="CASCADE_THREADS must be a whole number, got 'many'"):
        model_config(env={"CASCADE_THREADS": "many"})


def test_the_launchers_flags_are_every_model_setting():
    parser = argparse.ArgumentParser()
    add_model_flags(parser, page=True)
    args = parser.parse_args(["--threads", "2", "--n-ctx", "256", "--gpu-layers", "-1", "--parallel", "2",
                              "--batch-slots"])
    assert model_flags(args) == {"draft": None, "target": None, "n_threads": 2, "n_ctx": 256, "n_batch": None,
                                 "n_gpu_layers": -1, "router": None, "parallel": 2, "batch_slots": True}
    assert model_config(model_flags(args), env={}).device == "GPU (all layers offloaded), CPU, 2 threads"


def test_the_command_line_has_no_page_only_flag():
    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--parallel", "2"])


def test_slots_take_turns_unless_batching_is_asked_for():
    assert model_config(env={}, serving=True).batch_slots is False
    assert model_config(env={"CASCADE_BATCH_SLOTS": "1"}, serving=True).batch_slots is True
    parser = argparse.ArgumentParser()
    add_model_flags(parser, page=True)
    flags = model_flags(parser.parse_args(["--no-batch-slots"]))
    assert model_config(flags, env={"CASCADE_BATCH_SLOTS": "yes"}, serving=True).batch_slots is False  # flag wins
    with pytest.raises(ValueError, match="CASCADE_BATCH_SLOTS must be 1 or 0, got 'maybe'"):
        model_config(env={"CASCADE_BATCH_SLOTS": "maybe"})


def test_servers_run_several_generations_at_once_and_the_library_one():
    assert model_config(env={}).parallel == ModelConfig().parallel == 1
    assert model_config(env={}, serving=True).parallel == SERVING_DEFAULTS["parallel"] > 1
    assert model_config(env={"CASCADE_PARALLEL": "2"}, serving=True).parallel == 2


def test_model_settings_out_of_range_are_named():
    with pytest.raises(ValueError, match="parallel must be between 1 and 64, got 0"):
        model_config(env={"CASCADE_PARALLEL": "0"})


def test_the_command_line_reads_the_same_environment_as_the_page(toy):
    """CASCADE_N_CTX reaches the command line too: a 64-token context refuses a longer prompt."""
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--raw", "--json",
                "the cat " * 40, env={"CASCADE_N_CTX": "64", "CASCADE_THREADS": "1"})
    assert r.returncode == 2 and "the context holds 64" in r.stderr
    r = cascade("generate", "--draft", str(toy.small), "--target", str(toy.related), "--raw", "--json",
                "--n-ctx", "1024", "--max-tokens", "4", "the cat " * 40, env={"CASCADE_N_CTX": "64"})
    assert r.returncode == 0, r.stderr
    assert json_lines(r.stdout)[1]["n_tokens"] == 4
