"""BertConfig: the model hyperparameters, named exactly like the original `bert_config.json` keys.

The dataclass round-trips through the original JSON file, so a config written here is read by the
original code and by every converter that understands it, and vice versa.
"""

import dataclasses
import json
import math
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from bert_tf import io

# The hidden_act names and what each computes. The original code's "gelu" is the tanh
# approximation
#   0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
# Hugging Face calls that form "gelu_new" and uses "gelu" for the exact erf form, so its names
# are a column of this table (never guessed from context): the first one is what we write to a
# Hugging Face config.json, all of them are read back as the row's name. A spelling of another
# row's function (gelu_new, swish) has no Hugging Face names of its own.


class Activation(NamedTuple):
  """One hidden_act value."""
  function: str          # gelu_tanh, gelu_exact, or the Keras activation of that name
  meaning: str
  hugging_face: Tuple[str, ...] = ()


HIDDEN_ACTIVATIONS: Dict[str, Activation] = {
    "gelu": Activation("gelu_tanh", "tanh approximation of GELU (the original BERT code's "
                       "meaning)", ("gelu_new", "gelu_pytorch_tanh")),
    "gelu_new": Activation("gelu_tanh", "tanh approximation of GELU (Hugging Face's name; same "
                           "as 'gelu' here)"),
    "gelu_exact": Activation("gelu_exact", "exact GELU, 0.5 * x * (1 + erf(x / sqrt(2)))",
                             ("gelu",)),
    "relu": Activation("relu", "max(x, 0)", ("relu",)),
    "tanh": Activation("tanh", "tanh(x)", ("tanh",)),
    "silu": Activation("silu", "x * sigmoid(x) (also called swish)", ("silu", "swish")),
    "swish": Activation("silu", "x * sigmoid(x) (same as 'silu')"),
    "linear": Activation("linear", "identity", ("linear",)),
}


def hf_activation(hidden_act: str) -> str:
  """The Hugging Face hidden_act name of one of ours (a spelling takes its function's name)."""
  function = HIDDEN_ACTIVATIONS[hidden_act].function
  return next(row.hugging_face[0] for row in HIDDEN_ACTIVATIONS.values()
              if row.function == function and row.hugging_face)


def activation_from_hf(hf_name: str) -> Optional[str]:
  """Our hidden_act name for a Hugging Face one, or None when we have no equivalent."""
  return next((name for name, row in HIDDEN_ACTIVATIONS.items() if hf_name in row.hugging_face),
              None)


class ConfigError(ValueError):
  """A bert_config.json that cannot describe a valid model."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Hyperparameters of a BERT encoder; field names are the original bert_config.json keys."""

  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02

  def __post_init__(self):
    problems = []
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{name} must be an integer, got {value!r}")
      elif value <= 0:
        problems.append(f"{name} must be positive, got {value}")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append(f"{name} must be a number, got {value!r}")
      elif not 0.0 <= value < 1.0:
        problems.append(f"{name} must be in [0, 1), got {value}")
    value = self.initializer_range
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      problems.append(f"initializer_range must be a number, got {value!r}")
    elif not (math.isfinite(value) and value > 0):
      problems.append(f"initializer_range must be positive, got {value}")
    if not isinstance(self.hidden_act, str) or self.hidden_act.lower() not in HIDDEN_ACTIVATIONS:
      problems.append(f"hidden_act {self.hidden_act!r} is not one of "
                      f"{', '.join(sorted(HIDDEN_ACTIVATIONS))}")
    if (not problems and self.hidden_size % self.num_attention_heads != 0):
      problems.append(f"hidden_size ({self.hidden_size}) is not a multiple of "
                      f"num_attention_heads ({self.num_attention_heads})")
    if problems:
      raise ConfigError("Invalid BERT config: " + "; ".join(problems))
    # Activation names are case-insensitive in the original; store the canonical lower-case form.
    object.__setattr__(self, "hidden_act", self.hidden_act.lower())

  @property
  def attention_head_size(self) -> int:
    return self.hidden_size // self.num_attention_heads

  # === Conversion ===
  @classmethod
  def from_dict(cls, values: Mapping[str, Any], source: str = "config") -> "BertConfig":
    """Builds a config from a dict with the original keys; unknown keys are an error.

    Args:
      values: the keys and values of a bert_config.json.
      source: where the values came from, named in error messages.
    """
    if not isinstance(values, Mapping):
      raise ConfigError(f"{source}: expected a JSON object, got {type(values).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; "
                        f"known keys are {', '.join(sorted(known))}")
    try:
      return cls(**dict(values))
    except ConfigError as e:
      raise ConfigError(f"{source}: {e}") from None

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_hf_dict(cls, values: Mapping[str, Any], source: str = "config.json") -> "BertConfig":
    """A config from a Hugging Face BERT config.json dict (its other keys are ignored).

    Raises:
      ConfigError: the config describes something this model cannot reproduce (another
        LayerNorm epsilon, relative positions, an activation without an equivalent).
    """
    act = values.get("hidden_act", "gelu")
    hidden_act = activation_from_hf(act)  # their "gelu" is the exact erf form
    if hidden_act is None:
      raise ConfigError(f"{source}: hidden_act {act!r} has no equivalent here")
    if float(values.get("layer_norm_eps", 1e-12)) != 1e-12:
      raise ConfigError(f"{source}: layer_norm_eps {values['layer_norm_eps']} is not BERT's "
                        "1e-12")
    if values.get("position_embedding_type", "absolute") != "absolute":
      raise ConfigError(f"{source}: position_embedding_type "
                        f"{values['position_embedding_type']!r} is not supported")
    keys = [f.name for f in dataclasses.fields(cls) if f.name != "hidden_act"]
    return cls.from_dict(dict({k: values[k] for k in keys if k in values},
                              hidden_act=hidden_act), source=source)

  @classmethod
  def from_json_string(cls, text: str, source: str = "config") -> "BertConfig":
    """The config of a bert_config.json's text, or of a Hugging Face config.json's (told apart
    by its "model_type" key)."""
    try:
      values = json.loads(text)
    except json.JSONDecodeError as e:
      raise ConfigError(f"{source}: not valid JSON ({e})") from None
    if isinstance(values, Mapping) and "model_type" in values:
      if values["model_type"] != "bert":
        raise ConfigError(f"{source}: a Hugging Face config of model_type "
                          f"{values['model_type']!r}; only \"bert\" is read here")
      return cls.from_hf_dict(values, source=source)
    return cls.from_dict(values, source=source)

  def to_json_string(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  @classmethod
  def from_json_file(cls, path: str) -> "BertConfig":
    """Reads a bert_config.json (any tf.io.gfile path: local, gs://, ram://)."""
    if not io.exists(path):
      raise ConfigError(f"bert config file not found: {path}")
    return cls.from_json_string(io.read_text(path), source=path)

  def to_json_file(self, path: str) -> None:
    """Writes the config as the original's JSON, atomically (temporary name, then rename)."""
    io.write_text(path, self.to_json_string())

  def replace(self, **changes) -> "BertConfig":
    """A copy with some fields changed (validated again)."""
    return dataclasses.replace(self, **changes)


# Presets of the released BERT sizes (Turc et al. 2019 for the small ones). Each has a JSON twin in
# configs/bert_config_<name>.json; a test keeps the two equal.
PRESETS = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8),
    "medium": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16),
}


def preset(name: str) -> BertConfig:
  """The config of a released BERT size: tiny, mini, small, medium, base or large."""
  if name not in PRESETS:
    raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
  sizes = PRESETS[name]
  return BertConfig(intermediate_size=4 * sizes["hidden_size"], **sizes)
