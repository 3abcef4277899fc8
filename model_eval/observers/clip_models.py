"""Zero-shot vision-language observers (CLIP, Radford et al. 2021) through open_clip.

A CLIP model answers over the experiment's own labels: each label's text embedding is the mean
of its prompt templates' normalised embeddings, normalised again (the prompt ensembling of the
CLIP paper, Sec. 3.1.4), and an image's probabilities are the softmax of the learned-temperature
cosine similarities to them. The decision rules then map each label to its own output, so every
classification rule applies unchanged; the image embedding is the observer's features.

Spec: ``clip:ARCH:WEIGHTS`` (``clip-photo`` for the single template "a photo of a {label}.").
WEIGHTS is a local open_clip checkpoint file, an open_clip pretrained tag found in the Hugging
Face cache (nothing is fetched), or ``random`` (a randomly initialised model, seed 0, for tests).
"""

from __future__ import annotations

from pathlib import Path

from cuebench.trials import NOT_CLEAR, Experiment

from ..models import ModelError, UnknownArchitecture, WeightsNotFound, sha256_file
from ..torch_compat import import_timm
from .module import ModuleObserver

RANDOM = "random"
HF_WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
"""The names open_clip gives a checkpoint on the Hugging Face hub, safetensors first, as it reads them."""
PREPROCESS = ("mean", "std", "interpolation", "resize_mode")
"""What a pretrained tag's config says of its preprocessing, kept when its cached file is loaded by path."""


def import_open_clip():
    """``open_clip``, imported after ``torch_compat`` so its torchvision and timm imports load here."""
    import_timm()
    try:
        import open_clip
    except ImportError:
        raise ModelError("CLIP observers need open_clip: pip install --no-deps open-clip-torch ftfy regex wcwidth "
                         "(or the project's `clip` extra)") from None
    return open_clip


def hf_cached_checkpoint(arch: str, tag: str) -> Path | None:
    """The cached file of open_clip's pretrained ``tag`` of ``arch``, if the Hugging Face cache holds it."""
    from huggingface_hub import try_to_load_from_cache

    repo = import_open_clip().get_pretrained_cfg(arch, tag).get("hf_hub", "").strip("/")
    for filename in HF_WEIGHT_FILES if repo else ():
        hit = try_to_load_from_cache(repo, filename)
        if isinstance(hit, str):
            return Path(hit)
    return None


def parse_clip_weights(name: str, weights: str) -> tuple[str, str]:
    """``ARCH:WEIGHTS`` after ``clip:`` -> (open_clip architecture, weights), both checked to exist."""
    arch, _, source = weights.partition(":")
    open_clip = import_open_clip()
    if not arch or not source:
        raise UnknownArchitecture(f"model spec {name}:{weights} needs an open_clip architecture and weights: "
                                  f"{name}:ARCH:WEIGHTS, e.g. {name}:ViT-B-32:PATH/TO/open_clip_model.safetensors, "
                                  f"{name}:ViT-B-32:laion2b_s34b_b79k (from the Hugging Face cache) or {name}:RN50:random")
    if arch not in open_clip.list_models():
        import difflib

        close = difflib.get_close_matches(arch, open_clip.list_models(), n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see open_clip.list_models()"
        raise UnknownArchitecture(f"unknown open_clip architecture {arch!r}{hint}")
    return arch, source


def label_text(label: str) -> str:
    """A label as words in a prompt: folder names' underscores and hyphens become spaces."""
    return label.replace("_", " ").replace("-", " ")


class ClipObserver(ModuleObserver):
    """Zero-shot CLIP (clip:ARCH:WEIGHTS): the experiment's labels through the CLIP paper's 80 ImageNet prompt templates, averaged."""

    templates: tuple[str, ...] = ()
    """Prompt templates, each with one ``{label}``; an empty tuple means open_clip's copy of the CLIP
    paper's 80 ImageNet templates. A subclass sets its own to change the prompts."""

    @classmethod
    def from_spec(cls, name: str, weights: str, device: str) -> "ClipObserver":
        return cls(name, *parse_clip_weights(name, weights), device)

    def __init__(self, name: str, arch: str, weights: str, device: str):
        import torch

        open_clip = import_open_clip()
        if weights == RANDOM:
            torch.manual_seed(0)
            model, source, tag = open_clip.create_model(arch, pretrained=None), "random initialisation (seed 0)", RANDOM
        else:
            path, tagged = Path(weights).expanduser(), {}
            if not path.is_file():  # a pretrained tag: its cached file, with the tag's activation and preprocessing
                path, tagged = self._cached(arch, weights), open_clip.get_pretrained_cfg(arch, weights)
            digest = sha256_file(path)
            model = open_clip.create_model(arch, pretrained=str(path), weights_only=True,
                                           force_quick_gelu=bool(tagged.get("quick_gelu")),
                                           force_preprocess_cfg={k: v for k, v in tagged.items() if k in PREPROCESS})
            source, tag = f"file:{path.name} (sha256 {digest})", f"file-{digest[:12]}"
        cfg = open_clip.get_model_preprocess_cfg(model)
        size = cfg["size"] if isinstance(cfg["size"], (tuple, list)) else (cfg["size"], cfg["size"])
        data_config = {"input_size": (3, *size), "mean": tuple(cfg["mean"]), "std": tuple(cfg["std"]),
                       "interpolation": cfg.get("interpolation", "bicubic"), "crop_pct": 1.0, "crop_mode": "center"}
        self.prompts = self.templates or tuple(template("{label}") for template in
                                               open_clip.zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES)
        super().__init__(model, f"{name}:{arch}:{tag}", {"model": f"open_clip/{arch}", "weights": source,
                                                         "prompts": len(self.prompts)}, data_config, device)
        self.tokenizer = open_clip.get_tokenizer(arch)
        self._text = {}  # classes -> their normalised text embeddings, computed once per label set

    @staticmethod
    def _cached(arch: str, tag: str) -> Path:
        open_clip = import_open_clip()
        if not open_clip.get_pretrained_cfg(arch, tag):
            tags = ", ".join(t for a, t in open_clip.list_pretrained() if a == arch) or "none"
            raise WeightsNotFound(f"clip weights {tag!r} for {arch} are neither a file nor an open_clip pretrained "
                                  f"tag of it (its tags: {tags})")
        path = hf_cached_checkpoint(arch, tag)
        if path is None:
            repo = open_clip.get_pretrained_cfg(arch, tag).get("hf_hub", "").strip("/")
            how = f"fetch it once with `hf download {repo}` (or `huggingface-cli download {repo}`)" if repo else \
                "open_clip has no Hugging Face copy of it; download the file and give its path"
            raise WeightsNotFound(f"no weights for clip {arch}:{tag} here: looked in the Hugging Face cache for "
                                  f"{repo or 'a hub id'}; {how}, or give a local file as clip:{arch}:PATH")
        return path

    def prepare(self, experiment: Experiment) -> None:
        self.classes = tuple(label for label in experiment.label_set.labels if label != NOT_CLEAR)
        if self.classes not in self._text:
            self._text[self.classes] = self.text_embeddings(self.classes)

    def text_embeddings(self, labels: tuple[str, ...]):
        """(labels, D): each label's prompts encoded and normalised, averaged, normalised (CLIP, Sec. 3.1.4)."""
        import torch

        rows = []
        with torch.inference_mode():
            for label in labels:
                tokens = self.tokenizer([p.format(label=label_text(label)) for p in self.prompts]).to(self.device)
                embedded = self.model.encode_text(tokens).float()
                mean = (embedded / embedded.norm(dim=-1, keepdim=True)).mean(dim=0)
                rows.append(mean / mean.norm())
        return torch.stack(rows)

    def forward(self, images, kinds):
        embedded = self.model.encode_image(images).float()
        out = {"features": embedded} if "features" in kinds else {}
        if "probabilities" in kinds:
            if self.classes is None:
                raise ModelError(f"observer {self.observer_id} has no labels yet (prepare(experiment) sets them)")
            cosine = (embedded / embedded.norm(dim=-1, keepdim=True)) @ self._text[self.classes].T
            out["probabilities"] = (self.model.logit_scale.exp().float() * cosine).softmax(dim=-1)
        return out


class ClipPhoto(ClipObserver):
    """Zero-shot CLIP (clip-photo:ARCH:WEIGHTS): the experiment's labels in the one prompt "a photo of a {label}."."""

    templates = ("a photo of a {label}.",)
