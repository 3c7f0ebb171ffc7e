"""Every benchmark runs from a clone: its default inputs are inside the repository.

The committed corpora unpack to the text their md5 records, no script or page points outside the
repository for its data, and the cheap scripts' help (which evaluates every default, unpacking
the corpora) runs in a clean process.
"""

import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(REPO, "benchmarks")
# A path that leaves the repository for its sibling data folder, written as a path or as the
# pieces of an os.path.join.
OUTSIDE = re.compile(r"\.\./shared|[\"']shared[\"']\s*,\s*[\"']data[\"']")


def _corpora():
  spec = importlib.util.spec_from_file_location("benchmark_corpora",
                                                os.path.join(BENCHMARKS, "corpora.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_committed_corpora_unpack_to_their_recorded_text():
  corpora = _corpora()
  assert sorted(corpora.CORPORA) == ["austen_moby", "web_bible_books"]
  for name in corpora.CORPORA:
    path = corpora.path(name)
    assert corpora._md5(path) == corpora.CORPORA[name]  # pylint: disable=protected-access
    with open(path, encoding="utf-8") as f:
      text = f.read()
    documents = [d for d in text.split("\n\n") if d.strip()]
    assert len(documents) == {"austen_moby": 404, "web_bible_books": 92}[name]
    assert corpora.path(name) == path  # unpacked once, then reused
  assert os.path.exists(corpora.VOCAB_FILE) and os.path.exists(corpora.CHINESE_60K)
  with pytest.raises(ValueError, match="unknown corpus 'linux_doc_en'.*austen_moby"):
    corpora.path("linux_doc_en")


def test_a_corrupt_corpus_is_refused_and_leaves_no_copy(tmp_path, monkeypatch):
  corpora = _corpora()
  monkeypatch.setattr(corpora, "CORPORA", {"austen_moby": "0" * 32})
  monkeypatch.setattr(corpora.tempfile, "gettempdir", lambda: str(tmp_path))
  with pytest.raises(ValueError, match=r"austen_moby\.txt\.gz unpacks to md5 dcbf58d0.*not the "
                                       r"recorded 0{32}"):
    corpora.path("austen_moby")
  assert os.listdir(tmp_path / "bert_tf_benchmark_corpora") == []


def test_no_script_or_page_reads_data_outside_the_repository():
  pages = [os.path.join(REPO, "README.md"), os.path.join(REPO, "CONTRIBUTING.md"),
           os.path.join(BENCHMARKS, "README.md")] + glob.glob(os.path.join(REPO, "docs", "*.md"))
  found = []
  for path in sorted(glob.glob(os.path.join(BENCHMARKS, "*.py"))) + pages:
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        if OUTSIDE.search(line):
          found.append(f"{os.path.relpath(path, REPO)}:{number}: {line.strip()}")
  assert not found, "\n".join(found)


@pytest.mark.parametrize("script", ["tokenization", "pretraining_data", "beam_pretraining_data",
                                    "grouping_accuracy", "reference_tokenizer_speed",
                                    "multiple_choice"])
def test_script_help_evaluates_its_defaults_from_a_clone(script):
  result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, f"{script}.py"), "--help"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
  assert result.returncode == 0, result.stderr
  assert "usage:" in result.stdout


def test_length_aware_names_an_unknown_squad_system_before_any_work():
  result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "length_aware.py"),
                           "--squad_systems=ours,hf_nope", "--results_file=/nonexistent/x.json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
  assert result.returncode != 0
  assert "--length_tasks / --systems / --squad_systems: unknown hf_nope;" in result.stderr
  assert "tensorflow" not in result.stderr.lower()  # refused before TensorFlow was imported
