"""Speed of bert_tf's pure-Python tokenizer against the naive character-by-character oracle.

The oracle (tests/test_tokenization.py) transcribes the original release's rules one character at
a time, as the original does, so its speed stands in for the original's. With --check, every line
of every file must also give identical tokens, uncased and cased.

  .venv/bin/python benchmarks/reference_tokenizer_speed.py \
      --vocab tests/data/vocab_uncased.txt tests/data/cpd_austen_100k.txt

(or any text file; benchmarks/corpora.py unpacks the committed austen_moby corpus). Writes
benchmarks/results/reference_tokenizer_speed_DATE.json (benchmarks/results_file.py);
--smoke times the first 200 lines of tests/data/cpd_austen_100k.txt and writes to a temporary
folder.
"""

import argparse
import importlib.util
import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

from bert_tf import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position
import results_file  # pylint: disable=g-import-not-at-top,wrong-import-position

SMOKE_LINES = 200


def load_oracle():
  """Imports the test module by path: the oracle lives beside the tests that rely on it."""
  path = os.path.join(REPO_ROOT, "tests", "test_tokenization.py")
  spec = importlib.util.spec_from_file_location("tokenization_oracle", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def read_lines(path, limit=None):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:limit]


def timed(fn, lines):
  start = time.perf_counter()
  pieces = 0
  for line in lines:
    pieces += len(fn(line))
  return time.perf_counter() - start, pieces


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("files", nargs="*", help="text files, one sentence per line (with --smoke "
                      "default tests/data/cpd_austen_100k.txt)")
  parser.add_argument("--vocab", default=os.path.join(REPO_ROOT, "tests", "data",
                                                      "vocab_uncased.txt"))
  parser.add_argument("--check", action="store_true",
                      help="compare every line with the oracle (uncased and cased); no timing")
  parser.add_argument("--skip_oracle_timing", action="store_true")
  results_file.add_arguments(parser)
  args = parser.parse_args()
  if not args.files:
    if not args.smoke:
      parser.error("name at least one text file (or run --smoke)")
    args.files = [os.path.join(REPO_ROOT, "tests", "data", "cpd_austen_100k.txt")]
  limit = SMOKE_LINES if args.smoke else None
  oracle = load_oracle()

  if args.check:
    failures = 0
    for lower in (True, False):
      tok = tokenization.FullTokenizer(args.vocab, do_lower_case=lower)
      for path in args.files:
        lines = read_lines(path, limit)
        bad = 0
        for number, line in enumerate(lines, 1):
          if tok.tokenize(line) != oracle.oracle_full(line, tok.vocab, lower):
            bad += 1
            if bad <= 3:
              print(f"  MISMATCH {path}:{number}: {line!r}")
        nonascii = sum(not line.isascii() for line in lines)
        print(f"{'uncased' if lower else 'cased  '} {os.path.basename(path)}: {len(lines)} lines "
              f"({nonascii} non-ASCII), {bad} differ")
        failures += bad
    sys.exit(1 if failures else 0)

  print(f"{'file':24s} {'tokenizer':22s} {'MB/s':>7s} {'wordpieces/s':>13s} {'speed-up':>8s}")
  table = []
  for path in args.files:
    lines = read_lines(path, limit)
    megabytes = len("\n".join(lines).encode("utf-8")) / 1e6
    tok = tokenization.FullTokenizer(args.vocab, do_lower_case=True)
    tokenization._patterns()  # pylint: disable=protected-access  (one-off set-up, not throughput)
    rows = []
    # Fresh tokenizers each time, so the word cache starts cold as in real use.
    rows.append(("bert_tf tokenize",) + timed(
        tokenization.FullTokenizer(args.vocab).tokenize, lines))
    rows.append(("bert_tf tokenize_to_ids",) + timed(
        tokenization.FullTokenizer(args.vocab).tokenize_to_ids, lines))
    rows.append(("bert_tf BasicTokenizer",) + timed(
        tokenization.BasicTokenizer().tokenize, lines))
    if not args.skip_oracle_timing:
      rows.append(("naive oracle (full)",) + timed(
          lambda line: oracle.oracle_full(line, tok.vocab, True), lines))
    base = rows[-1][1] if not args.skip_oracle_timing else None
    for name, seconds, pieces in rows:
      ratio = f"{base / seconds:7.1f}x" if base else ""
      print(f"{os.path.basename(path):24s} {name:22s} {megabytes / seconds:7.2f} "
            f"{pieces / seconds:13,.0f} {ratio:>8s}")
      table.append(dict(file=os.path.basename(path), tokenizer=name, lines=len(lines),
                        megabytes=megabytes, seconds=seconds, wordpieces=pieces,
                        mb_per_second=megabytes / seconds,
                        speedup=base / seconds if base else None))
  results_file.write("reference_tokenizer_speed", dict(rows=table), args.smoke, args.results_file)


if __name__ == "__main__":
  main()
