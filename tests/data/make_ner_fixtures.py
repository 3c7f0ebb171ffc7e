"""Makes the token-classification fixtures under tests/data/ner/ from ../shared/data/corpora.

Run by hand from anywhere (never by the tests: CI has no ../shared):

    .venv/bin/python tests/data/make_ner_fixtures.py [--corpora DIR] [--out DIR]

The output is deterministic (the classifier fixtures' seed and document split). A person / place
tagging task in CoNLL-2003's layout, with tags known by construction:

* Sentences are lines of Austen / Melville (austen_moby.txt) of 6 to 60 words, split into words
  as the BERT BasicTokenizer splits them (whitespace, and every punctuation character alone;
  case kept), so that the words joined by spaces split back into the same words.
* A word is an entity word when it is in the fixed name lists below: PER (characters of the
  novels) or LOC (places). Consecutive entity words of one type form one entity ("Elizabeth
  Bennet"). Two thirds of the sentences hold an entity, one third none.
* Tags are written in IOB1, as the original CoNLL-2003 files: I-<type> inside entities and at
  their start, B-<type> only for an entity that directly follows another of the same type (by
  construction: a comma-less list of names of the same type, "Jane Elizabeth" is one entity, so B-
  never appears here; tests convert to IOB2 / IOBES where they need those).
* Documents: each novel chapter of the split's documents is one -DOCSTART- document; sentences
  keep their order within it. train 400 sentences, dev 120, test 120 (from the classifier
  fixtures' train / dev / test documents respectively).

Files: ner/train.txt, ner/dev.txt, ner/test.txt, two columns `word tag`, a blank line between
sentences, `-DOCSTART- O` then a blank line before each document.
"""

import argparse
import os
import random
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_classifier_fixtures import SEED, read_documents, split_documents  # noqa: E402  pylint: disable=wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from bert_tf import tokenization  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT_CORPORA = os.path.join(os.path.dirname(REPO), "shared", "data", "corpora")
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "ner")
SIZES = {"train": 400, "dev": 120, "test": 120}
WORDS = (6, 60)
PERSONS = frozenset("""
Fanny Emma Elizabeth Elinor Catherine Crawford Jane Marianne Anne Harriet Ahab Weston Darcy
Edmund Knightley Elton Bennet Woodhouse Bingley Elliot Bertram Edward Wentworth Lydia Ishmael
Queequeg Starbuck Stubb Flask Willoughby Dashwood Collins Wickham Churchill Fairfax Norris
Musgrove Russell Lucy Charlotte Mary Julia Maria Tilney Morland Thorpe Isabella Brandon Ferrars
Jennings Palmer Price Rushworth Yates Frank Robert Martin Bates Louisa Henrietta Benwick Harville
""".split())
PLACES = frozenset("""
London Bath Hartfield Pemberley Longbourn Netherfield Highbury Mansfield Norland Barton
Kellynch Brighton England Nantucket Portsmouth Uppercross Lyme Randalls Donwell Meryton
Rosings Cleveland Northanger Devonshire Derbyshire Kent Hertfordshire Bristol Ireland
Scotland America Pacific Atlantic Japan India Africa Oxford Sotherton Thornton Delaford
""".split())


def words_of(line, basic):
  return basic.tokenize(line)


def tag_iob1(words):
  """IOB1 tags: consecutive names of one type are one entity, so every entity word is I-."""
  return ["I-PER" if w in PERSONS else "I-LOC" if w in PLACES else "O" for w in words]


def usable(line, words):
  if not WORDS[0] <= len(words) <= WORDS[1]:
    return False
  if line != line.strip() or any(unicodedata.category(c)[0] == "C" for c in line):
    return False
  return all(" " not in w and w for w in words)


def make(corpora_dir, out_dir):
  rng = random.Random(SEED)
  docs = read_documents(os.path.join(corpora_dir, "austen_moby.txt"))
  split_docs = split_documents(docs, rng)
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  pick = random.Random(SEED + 1)
  seen = set()
  os.makedirs(out_dir, exist_ok=True)
  for split in ("train", "dev", "test"):
    with_entity, without = [], []
    for d in split_docs[split]:
      for i, line in enumerate(docs[d]):
        if line in seen:
          continue
        words = words_of(line, basic)
        if not usable(line, words):
          continue
        tags = tag_iob1(words)
        (with_entity if any(t != "O" for t in tags) else without).append((d, i, words, tags))
    pick.shuffle(with_entity)
    pick.shuffle(without)
    n_with = SIZES[split] * 2 // 3
    chosen = with_entity[:n_with] + without[:SIZES[split] - n_with]
    if len(chosen) != SIZES[split]:
      raise RuntimeError(f"{split}: only {len(chosen)} sentences")
    chosen.sort(key=lambda item: (item[0], item[1]))
    lines = []
    current = None
    for d, i, words, tags in chosen:
      seen.add(docs[d][i])
      if d != current:
        lines += ["-DOCSTART- O", ""]
        current = d
      lines += [f"{w} {t}" for w, t in zip(words, tags)]
      lines.append("")
    with open(os.path.join(out_dir, f"{split}.txt"), "w", encoding="utf-8", newline="\n") as f:
      f.write("\n".join(lines))
    entities = sum(1 for _, _, _, tags in chosen for k, t in enumerate(tags)
                   if t != "O" and (k == 0 or tags[k - 1] != t))
    print(f"{split}: {len(chosen)} sentences, {sum(len(c[2]) for c in chosen)} words, "
          f"{entities} entities, {len({c[0] for c in chosen})} documents")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--corpora", default=DEFAULT_CORPORA)
  parser.add_argument("--out", default=DEFAULT_OUT)
  args = parser.parse_args(argv)
  make(args.corpora, args.out)


if __name__ == "__main__":
  main()
