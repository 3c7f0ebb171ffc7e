"""The benchmarks' default inputs, all inside the repository, so that every benchmark runs from a
fresh clone.

Two public-domain corpora in BERT's input format (one sentence a line, a blank line between
documents) are committed gzipped under benchmarks/data/corpora/ (their source is in
benchmarks/data/README.md): `path(name)` gives a plain-text copy, unpacked once into the
system's temp folder and checked against the md5 below. The vocab is the bert-base-uncased one
the tests already hold (tests/data/vocab_uncased.txt). Any benchmark still takes other files
through its flags.
"""

import gzip
import hashlib
import os
import tempfile

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARKS)
FOLDER = os.path.join(BENCHMARKS, "data", "corpora")

# name -> md5 of the unpacked text.
CORPORA = {
    "austen_moby": "dcbf58d047e8f916faf5056321756886",
    "web_bible_books": "dee8a9d9dfa45877cac17cef670569f0",
}
# English text with real sentence lengths, for the scripts that mix corpora.
ENGLISH = ("austen_moby", "web_bible_books")
# The 30,522-token uncased WordPiece vocab of BERT-Base (md5 64800d5d8528ce344256daf115d4965e).
VOCAB_FILE = os.path.join(REPO_ROOT, "tests", "data", "vocab_uncased.txt")
# The original's create_pretraining_data golden input (the first 100 kB of Austen's novels).
AUSTEN_100K = os.path.join(REPO_ROOT, "tests", "data", "cpd_austen_100k.txt")
# Chinese text mixed with ASCII (kernel documentation and poems), for the tokenizer benchmark.
CHINESE_60K = os.path.join(REPO_ROOT, "tests", "data", "cpd_zh_60k.txt")


def _md5(path):
  digest = hashlib.md5()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def path(name: str) -> str:
  """The plain-text path of committed corpus `name` (a key of CORPORA), unpacked on first use.

  The copy is named by its md5 and written to a temporary name first, so a copy that exists is
  whole; a committed file whose text does not match its md5 stops with both named.
  """
  if name not in CORPORA:
    raise ValueError(f"unknown corpus {name!r}: the committed ones are {sorted(CORPORA)}")
  md5 = CORPORA[name]
  cache = os.path.join(tempfile.gettempdir(), "bert_tf_benchmark_corpora")
  target = os.path.join(cache, f"{name}-{md5[:12]}.txt")
  if os.path.exists(target):
    return target
  os.makedirs(cache, exist_ok=True)
  source = os.path.join(FOLDER, f"{name}.txt.gz")
  partial = f"{target}.{os.getpid()}.partial"
  with gzip.open(source, "rb") as src, open(partial, "wb") as dst:
    for block in iter(lambda: src.read(1 << 20), b""):
      dst.write(block)
  found = _md5(partial)
  if found != md5:
    os.remove(partial)
    raise ValueError(f"{source} unpacks to md5 {found}, not the recorded {md5}")
  os.replace(partial, target)
  return target


def paths(names=ENGLISH) -> list:
  """path(name) of each name."""
  return [path(name) for name in names]


def documents(path: str) -> list:
  """The documents of a text in BERT's input format: lists of their stripped, non-empty lines
  (a blank line ends a document)."""
  found, current = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        current.append(line)
      elif current:
        found.append(current)
        current = []
  if current:
    found.append(current)
  return found
