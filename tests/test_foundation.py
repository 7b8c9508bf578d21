"""Foundation: the CLI, the package mapping and the embedded model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specd.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
SPECD = [sys.executable, "-m", "specd.cli"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    # run from a neutral directory so the repo root is not on sys.path
    return subprocess.run([*SPECD, *args], capture_output=True, text=True, cwd="/", timeout=120)


def test_help_lists_every_command():
    result = run_cli("--help")
    assert result.returncode == 0
    for name in COMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_help(name):
    result = run_cli(name, "--help")
    assert result.returncode == 0, result.stderr
    assert f"specd {name}" in result.stdout


def test_unknown_command_fails_clearly():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_bad_flag_fails_clearly():
    result = run_cli("generate", "--no-such-flag")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


def test_import_operator_is_the_standard_library():
    code = ("import operator, specd.operator, sysconfig; "
            "assert operator.__file__.startswith(sysconfig.get_paths()['stdlib']), operator.__file__; "
            "assert hasattr(operator, 'itemgetter'); "
            "assert specd.operator.__file__.endswith('operator/__init__.py'); print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_operator_and_api_do_not_import_torch():
    code = ("import sys, specd.api, specd.operator, specd.dashboard, specd.cli; "
            "specd.cli.build_parser(); print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    "reference, message",
    [
        ("no-such-model", "unknown model reference 'no-such-model'"),
        ("/nonexistent/model.gguf", "model file not found: /nonexistent/model.gguf"),
        ("./does/not/exist", "unknown model reference"),
        ("", "empty model reference"),
    ],
)
def test_bad_model_reference_is_one_clear_error(reference, message):
    from specd.worker.model import ModelLoadError, resolve_model

    with pytest.raises(ModelLoadError, match=message.replace(".", r"\.")):
        resolve_model(reference)


def test_bad_model_reference_from_the_cli_is_one_line():
    result = run_cli("generate", "--model", "/nonexistent/dir/x.gguf", "--max-tokens", "2")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "specd generate: error: model file not found: /nonexistent/dir/x.gguf"
    ]
    assert "Traceback" not in result.stderr


def test_directory_without_model_files_is_refused(tmp_path):
    from specd.worker.model import ModelLoadError, resolve_model

    with pytest.raises(ModelLoadError, match="no config.json and no .gguf files"):
        resolve_model(str(tmp_path))


def test_alias_resolves_inside_the_wheel():
    from specd.worker.model import resolve_model

    source = resolve_model("smollm2-135m")
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (Path(source.directory) / source.gguf_file).stat().st_size > 50_000_000


def test_cli_main_returns_error_code_for_specd_errors(capsys):
    assert main(["generate", "--model", "no-such-model"]) == 2
    assert "unknown model reference" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--data-shard", "two/4"], "--data-shard must be I/N"),
    (["--data-shard", "4/4"], "got '4/4'"),
    (["--extra-sampled", "-1"], "--extra-sampled must be >= 0"),
    (["--backbone-mlp", "-8"], "--backbone-mlp must be >= 0"),
])
def test_train_data_flags_are_refused_before_the_model_loads(capsys, flags, message):
    assert main(["train", "data", "--model", "no-such-model", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "unknown model reference" not in err


@pytest.mark.model
def test_alias_greedy_matches_transformers_generate(target, chat_prompt_ids):
    import torch

    from specd.worker.reference import greedy_decode

    assert target.device == "cpu" and target.dtype == torch.float32
    for prompt in ["What is the capital of France?", "Write a Python function that adds two numbers."]:
        ids = chat_prompt_ids(prompt)
        ours = greedy_decode(target.model, ids, 24)
        tensor = torch.tensor([ids])
        theirs = target.model.generate(tensor, attention_mask=torch.ones_like(tensor),
                                       max_new_tokens=24, do_sample=False,
                                       eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
        assert ours == theirs
        assert len(set(ours)) > 3  # a real continuation, not a repeated token
