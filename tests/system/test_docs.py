"""The docs runner: every fenced ``bash`` block of README.md and docs/*.md runs here, so docs and
code cannot drift apart.

Each block runs with ``bash -euo pipefail`` in one working folder per page (a page's later block
uses what an earlier one built), with the repository's ``cuebench`` first on PATH and ``../shared``
reachable as the docs write it. Long runs get small sizes through the one ``SMALL_SIZES`` table;
blocks that cannot run here are listed in ``SKIPPED`` (by page and first command) with the reason.
Pages run side by side (``CUEBENCH_DOCS_WORKERS``, default 2), each page's blocks in order.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import BLOCK_SECONDS, REPO
from stimuli.sources import default_images
from support import check_photo_folder, dist_subset

pytestmark = pytest.mark.slow

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SUBSET_PER_CLASS = 2  # cue-conflict images per shape class in the small copy of the published set
DIST_SUBSET = 6  # DiST photos (and triplets per set) in the small copy of the DiST release
PHOTO_CLASSES = 4  # class sub-folders (one photo each) of the runner's photos/ folder
DOCS_WORKERS = int(os.environ.get("CUEBENCH_DOCS_WORKERS", "2"))  # pages run side by side
BLOCK_TIMEOUT_S = 900  # per block: room for a loaded machine; long pages are split into steps


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the opening fence's line, 1-based
    text: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def key(self) -> tuple[str, str]:
        """(page, first command): what ``SKIPPED`` names a block by, stable when lines above it move."""
        first = next((line.strip() for line in self.text.splitlines()
                      if line.strip() and not line.strip().startswith("#")), "")
        return str(self.page.relative_to(REPO)), first


def bash_blocks(page: Path) -> list[Block]:
    """The page's fenced ```bash blocks; an unclosed fence is an error in the page itself."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, start = [], None
    for number, line in enumerate(lines, start=1):
        if start is None and line.strip() == "```bash":
            start = number
        elif start is not None and line.strip().startswith("```"):
            if line.strip() != "```":
                raise ValueError(f"{page.name}:{number}: a closing fence must be a line of its own: {line!r}")
            blocks.append(Block(page, start, "\n".join(lines[start:number - 1])))
            start = None
    if start is not None:
        raise ValueError(f"{page.name}:{start}: ```bash block is never closed")
    return blocks


BLOCKS = [block for page in PAGES for block in bash_blocks(page)]

# (pattern, replacement, why): applied in this order to each block, after joining "\"-continued lines.
SMALL_SIZES = [
    (r"(?m)^\.venv/bin/", "", "the docs run from a checkout; here the venv's bin is first on PATH"),
    (r"--eed-steps \d+", "--eed-steps 4", "EED runs 512-16,384 steps per image: minutes on 2 CPU cores"),
    (r"(--design (?:cue-decomposition|cue-conflict-eed))(?![^\n]*--eed-steps)", r"\1 --eed-steps 4",
     "the default EED run (16,384 steps) takes minutes per image on a CPU"),
    (r"--synthesis-steps \d+", "--synthesis-steps 2", "L-BFGS texture synthesis: minutes per image on a CPU"),
    (r"(--design dist )(?![^\n]*--synthesis-steps)", r"\1--synthesis-steps 2 ",
     "DiST's default 100 L-BFGS steps on 8 photos take minutes on a CPU"),
    (r"--runs \d+", "--runs 1", "one seeded run shows the command works; more only repeat it"),
    (r"(--adaptive [^:\s]+):\d+", r"\1:8",
     "QUEST+ asks one image at a time: each answer is a model pass or a 2 s simulated lab trial; 8 answers "
     "run the same block, resume and posterior rows as 40"),
    (r"--epochs \d+", "--epochs 1", "one epoch shows the command works"),
    (r"(cuebench train(?:-cues)? \S+)(?![^\n]*--epochs)", r"\1 --epochs 1", "the default epochs take minutes on a CPU"),
    (r"--model resnet18", "--model test_resnet --input-size 64", "timm's tiny test_resnet trains in seconds"),
    (r"--sizes [\d,]+", "--sizes 60,15,30", "DiagViB splits of a few dozen images build in seconds"),
    (r"(--design diagvib )(?![^\n]*--sizes)", r"\1--sizes 60,15,30 ",
     "DiagViB's default splits (thousands of images per study) take minutes"),
    (r"\.\./shared/data/geirhos2019/stimuli/cue-conflict", "../subset/cue-conflict",
     "the 1,280 published images -> 2 per shape class, same folder layout (made by the fixture)"),
    (r"\.\./shared/data/dist\b", "../subset/dist",
     "the DiST release -> 6 photos and their triplets, same layout (made by the fixture)"),
    (r"(?m)^cuebench serve admin-password (\S+)", r"echo docs-password | cuebench serve admin-password --password-stdin \1",
     "nobody types the password twice here: it comes on stdin (the option before EXPDIR, as people type it)"),
    (r"(?m)^cuebench serve (?!admin-password|codes|rotate-secret|rules)(.*?)(?:[ \t]*#.*)?$", r"serve_answers \1",
     "serve never exits: it runs in the background until its consent page answers, then stops"),
    (r"(?m)^\$EDITOR (\S+)(?:[ \t]*#.*)?$", r"fill_placeholders \1",
     "nobody edits here: each [[field: hint]] placeholder of the text becomes \"(filled in: field)\""),
    (r"(?m)^(?:xvfb-run -a )?cuebench lab run (.*?)(?: --fullscreen| --screen \d+)*(?: --simulate)?(?:[ \t]*#.*)?$",
     r"xvfb-run -a cuebench lab run \1 --simulate --refresh-hz 60",
     "nobody sits at the screen: PsychoPy's scripted participant on a virtual display (no stable refresh)"),
]

# Bash preamble of every block; serve_answers and fill_placeholders are what the substitutions above call.
# A consent page answers with a page below 500: 200, or 403 where only pilot codes are served (--pilot-only).
PREAMBLE = r"""
fill_placeholders() {
    sed -i -E 's/\[\[([^]:]*)[^]]*\]\]/(filled in: \1)/g' "$1"
}
serve_answers() {
    local port
    port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cuebench serve "$@" --port "$port" &
    local pid=$!
    for _ in $(seq 1 120); do
        if python -c 'import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError as err:
    sys.exit(err.code >= 500)' "http://127.0.0.1:$port/" 2> /dev/null; then kill "$pid"; wait "$pid" || true; return 0; fi
        kill -0 "$pid" 2> /dev/null || { wait "$pid"; return 1; }
        sleep 0.5
    done
    kill "$pid"; echo "cuebench serve $*: no answer on port $port" >&2; return 1
}
"""

GPU = "needs a CUDA GPU (--device/--eed-device/--synthesis-device cuda)"
CLUSTER = "needs a Ray cluster or Slurm (--executor ray/submitit, placeholder HEAD and /shared paths)"
BENCHMARK = "a benchmark (minutes; speed is measured in benchmarks/, not in the suite)"
TRAIN_CUES = "train-cues fine-tunes every algorithm on ImageNet weights: minutes on 2 CPU cores, over this runner's budget"
DEMO = "needs demo-output from `cuebench demo` (scripts/demo.sh): three models on 520 images, over budget"
DEPLOY = "a production host's set-up as root (apt, systemd, /etc, /srv); tests/system/test_deploy.py runs the files of docs/deploy/"
SKIPPED = {
    ('docs/deploy.md', 'sudo apt-get install -y nginx postgresql certbot git'): DEPLOY,
    ('docs/deploy.md', 'sudo -u postgres createuser cuebench'): DEPLOY,
    ('docs/deploy.md', 'cd /srv/cuebench'): DEPLOY,
    ('docs/deploy.md', 'sudo cp /srv/cuebench/cuebench/docs/deploy/cuebench.service /etc/systemd/system/'): DEPLOY,
    ('docs/deploy.md', 'sudo rm /etc/nginx/sites-enabled/default'): DEPLOY,
    ('docs/deploy.md', 'sudo cp /srv/cuebench/cuebench/docs/deploy/cuebench-backup.service /srv/cuebench/cuebench/docs/deploy/cuebench-backup.timer /etc/systemd/system/'): DEPLOY,
    ('docs/deploy.md', 'sudo systemctl stop cuebench'): DEPLOY,
    ('docs/deploy.md', 'sudo systemctl start cuebench-backup                                   # a backup from just before'): DEPLOY,
    ("docs/web.md", '.venv/bin/python -c "'): "reads from the server of the page's first block, running on port 8080",
    ('README.md', 'bash scripts/demo.sh'): "scripts/demo.sh installs the package into .venv first (pip); the suite runs the installed one",
    ('README.md', 'bash scripts/test.sh'): "scripts/test.sh runs this whole suite (and installs system packages)",
    ('docs/cue_decomposition.md', 'cuebench stimuli build --design cue-decomposition --images photos/ --out exp/cd --eed-device cuda'): GPU,
    ('docs/cue_decomposition.md', 'OMP_NUM_THREADS=1 python benchmarks/bench_eed.py            # CPU, 224x224, ratio + agreement after 512 steps'): f"{BENCHMARK}; its last line needs a GPU",
    ('docs/cue_decomposition.md', 'cuebench stimuli build --design seg-cue-decomposition --images shapes --convention generic --eed-steps 64 --voronoi-cells 16,32 --corruptions low_pass --out exp --workers 1'): "tests/model_eval/test_segmentation.py runs these commands on the labelled set and segmenters it makes",
    ('docs/cue_decomposition.md', 'cuebench stimuli build --design seg-cue-decomposition --images /shared/cityscapes-val --convention cityscapes \\'): f"{GPU}; {CLUSTER}; Cityscapes, ADE20k and the weights are the user's",
    ('docs/cue_decomposition.md', 'OMP_NUM_THREADS=1 python benchmarks/bench_seg_cues.py --images 8 --steps 32'): f"{BENCHMARK}; its last line needs a GPU",
    ('docs/diagvib.md', 'cuebench train studies/full --device cuda --amp --executor submitit \\'): CLUSTER,
    ('docs/diagvib.md', 'cuebench train studies/shape-hue --model alexnet --runs 3 --epochs 10'):
        "AlexNet and ResNet-50 on five dataset samples take minutes on 2 CPU cores, and torchvision's ResNet-50 "
        "file cannot be fetched here; tests/model_eval/test_training.py trains both baselines on a small study",
    ('docs/dist.md', 'cuebench stimuli build --design dist --images default --out exp/dist-ps --synthesis ps'):
        "Portilla-Simoncelli synthesis of the 16 versions ran over 8 minutes on 2 CPU cores here even with "
        "--synthesis-steps 2; tests/stimuli/test_synthesis.py runs the backend on small images",
    ('docs/dist.md', 'cuebench stimuli build --design dist --images photos/ --out exp/dist-gpu \\'): f"{GPU}; VGG-19 weights are not in this machine's torch hub cache",
    ('docs/dist.md', 'cuebench stimuli build --design dist --images photos/ --out exp/dist-people \\'):
        "synthesising 15 versions took 3 minutes on the loaded 2-core machine; tests/stimuli/test_dist_design.py runs "
        "this command (photos/ and check photos, practice, catch and attention trials) from a fresh folder",
    ('docs/scale.md', 'cuebench stimuli build --design cue-decomposition --images photos/ --eed-device cuda --out exp/cue-dec'): GPU,
    ('docs/scale.md', 'ray start --head --num-gpus 4'): CLUSTER,
    ('docs/scale.md', 'benchmarks/gpu_suite.sh --prepare           # where pip reaches PyPI: .whl/ and .shared/ for the GPU machine'): f"{GPU}; the first line downloads from PyPI, the dry run takes minutes (tests/system/test_gpu_suite.py checks its table)",
    ('docs/scale.md', 'ray start --head --port 6379'): CLUSTER,
    ('docs/scale.md', 'ray get-auth-token --generate'): CLUSTER,
    ('docs/scale.md', 'cuebench train /shared/exp/diagvib --device cuda --runs 5 --executor submitit \\'): CLUSTER,
    ('docs/open_science.md', 'OSF_TOKEN=... cuebench archive exp/suppression --osf abc12 --author "Ada Researcher" --license CC-BY-4.0 \\'):
        "sends to osf.io, which cannot be reached from the test machines (tests/system/test_open_science.py sends to a "
        "stand-in of OSF's storage API)",
    ('docs/lab.md', 'sudo apt-get install -y xvfb          # or: scripts/install.sh --with-test-tools'): "installs system packages with sudo apt-get",
    ('docs/lab.md', 'python -m venv .venv && . .venv/bin/activate      # Windows: .venv\\Scripts\\activate'): "makes a new virtual environment and installs into it (pip)",
    ('docs/models.md', 'pip install -e .                      # your package, beside cuebench'): "installs the reader's own plug-in package (pip install -e .)",
    ('docs/models.md', 'OMP_NUM_THREADS=1 python benchmarks/bench_eval.py --images 256 --batch-size 64'): f"{BENCHMARK}; its last line needs a GPU",
    ('docs/suppression.md', 'OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_stimuli.py --images default'): BENCHMARK,
    ('docs/models.md', 'cuebench eval --experiment exp --model tf_efficientnet_lite0:studies/cues/training/checkpoints/JOB.pth'): "JOB.pth stands for a checkpoint of the reader's own train-cues run",
    ('docs/models.md', 'hf download laion/CLIP-ViT-B-32-laion2B-s34B-b79K open_clip_model.safetensors'): "fetches CLIP and MAE weights from the Hugging Face hub (the random-weight line is tests/model_eval/test_vlm_observers.py)",
    ('docs/models.md', 'cuebench eval --model alexnet --experiment runs/demo'): "fetches torchvision's alexnet weights from the internet (the first line fails on purpose)",
    ('docs/scale.md', 'cuebench stimuli build --design cue-decomposition --images photos/ --eed-steps 16384 --out exp/cue-dec'): "exp/diagvib and photos/ of a real study (16,384 EED steps): built in README, minutes here",
    ('docs/training.md', 'cuebench train-cues studies/cues --photos PHOTOS --dist DIST_RELEASE \\'): "a synopsis with placeholders (PHOTOS, DIST_RELEASE, GEIRHOS); docs/training.md:163 is it concrete",
    ('docs/training.md', 'cuebench eval --experiment exp/suppression --model tf_efficientnet_lite0:studies/cues/training/checkpoints/JOB.pth \\'): "JOB.pth stands for a checkpoint of the reader's own train-cues run",
    ('docs/training.md', 'cuebench train-cues studies/cues --photos PHOTOS --dist DIST_RELEASE --cue-conflict CUE_CONFLICT \\'): "a synopsis of --algorithm-option with placeholders (PHOTOS, DIST_RELEASE, CUE_CONFLICT)",
    ('docs/training.md', 'cuebench train-cues studies/cues --photos PHOTOS --dist ../shared/data/dist \\'): TRAIN_CUES,
    ('docs/training.md', 'DOMAIN="caltech101 flowers102 pets stl10"'): f"{GPU}; the domain's data sets are the researcher's",
    ('README.md', 'cuebench train-cues exp/cues --photos ../shared/data/dist --dist ../shared/data/dist \\'): TRAIN_CUES,
    ('docs/training.md', 'python benchmarks/bench_distinguish.py runs/table3 --imagefolder imagenette2/train --dist DIST_RELEASE \\'):
        f"{GPU}; Imagenette and the DiST release are placeholders",
    ('docs/training.md', 'python -c "import csv, os; [os.makedirs(f\'dist-classes/{r[\\"imagenet_index\\"]}\', exist_ok=True) or os.symlink(os.path.abspath(f\'../shared/data/dist/original/{r[\\"image\\"]}.jpg\'), f\'dist-classes/{r[\\"imagenet_index\\"]}/{r[\\"image\\"]}.jpg\') for r in csv.DictReader(open(\'../shared/data/dist/labels.csv\'))]"'):
        "the reduced Table 3 run takes 13 minutes or more on 2 CPU cores; tests/system/test_bench_distinguish.py runs the same script at toy size",
    ('docs/web.md', 'cuebench serve codes study/ -n 50 > codes.txt          # entry codes to hand out'): "placeholder study/ and a secrets file under /etc",
    ('docs/web.md', 'cuebench serve admin-password study/                 # once'): "placeholder study/ (the page's own experiment is web-sample)",
    ('docs/adaptive.md', 'cuebench analyze demo-output --metric thresholds --out thresholds.csv'): DEMO,
    ('docs/analysis.md', 'cuebench analyze ../shared/data/geirhos2019/raw-data/cue-conflict --metric shape-bias'): f"{DEMO}; other-model-responses.csv is the reader's own file",
    ('docs/analysis.md', 'cuebench plan demo-output --effect 0.1 --power 0.8'): DEMO,
    ('docs/web.md', 'createuser study && createdb --owner study cue_study'): "needs a PostgreSQL server at the placeholder db.example.org",
    ('docs/web.md', '.venv/bin/python -m pytest tests/experiment_server/test_server.py tests/experiment_server/test_server_config.py tests/experiment_server/test_server_launch.py \\'): "runs eight test files of this suite and three load benchmarks",
    ('docs/web.md', '.venv/bin/python benchmarks/bench_server_load.py --participants 50 200 [--workers 4] [--database URL]'): f"{BENCHMARK} (a synopsis with [optional] arguments)",
}


def prepared(text: str) -> str:
    """The block as it runs here: continuations joined, then the SMALL_SIZES table applied."""
    text = re.sub(r"\\\n\s*", " ", text)
    for pattern, replacement, _why in SMALL_SIZES:
        text = re.sub(pattern, replacement, text)
    return text


def test_every_skip_names_a_block_and_its_reason():
    keys = {block.key for block in BLOCKS}
    assert set(SKIPPED) <= keys, f"skips for blocks that no longer exist: {sorted(set(SKIPPED) - keys)}"
    assert all(reason.strip() for reason in SKIPPED.values())
    print(f"docs runner: {len(BLOCKS)} bash blocks, {len(SKIPPED)} skipped")


def test_small_sizes_reach_the_commands_they_name():
    """Each substitution turns at least one documented command smaller, or it is dead weight."""
    unused = [pattern for pattern, _, _ in SMALL_SIZES
              if not any(re.search(pattern, re.sub(r"\\\n\s*", " ", b.text)) for b in BLOCKS)]
    assert not unused, f"SMALL_SIZES entries that match no documented command: {unused}"


def test_documented_commands_keep_their_files_in_the_working_folder():
    """A reader runs the docs' commands in a folder of their own, as this runner does: none reads or writes
    the machine's shared /tmp, where another user's files of the same name would be."""
    outside = [block.id for block in BLOCKS if re.search(r"(?<![\w.~])/tmp\b", block.text)]
    assert not outside, f"documented commands that use /tmp instead of a relative path: {outside}"


@pytest.fixture(scope="session")
def docs_root(tmp_path_factory, shared) -> Path:
    """``T/shared`` -> the shared data, ``T/subset`` small copies of the published sets, and a
    ``photos/`` folder of real photos and a ``check-photos/`` folder of the bundled classes (``--check-images``) that
    each page's working folder starts with."""
    root = tmp_path_factory.mktemp("docs")
    (root / "shared").symlink_to(shared.resolve(), target_is_directory=True)
    cue_conflict = shared / "data" / "geirhos2019" / "stimuli" / "cue-conflict"
    for folder in sorted(path for path in cue_conflict.iterdir() if path.is_dir()):
        copy = root / "subset" / "cue-conflict" / folder.name
        copy.mkdir(parents=True)
        for image in sorted(folder.glob("*.png"))[:SUBSET_PER_CLASS]:
            shutil.copy(image, copy / image.name)
    dist_subset(shared / "data" / "dist", root / "subset" / "dist", DIST_SUBSET)
    make_photo_folder(shared / "data" / "dist", root / "photos")
    check_photo_folder(root / "check-photos", {image.category: (image.name,) for image in default_images()[:6]})
    return root


def make_photo_folder(release: Path, photos: Path) -> None:
    """A researcher's photos as the docs mean them: one sub-folder per class, named by the class (the
    first PHOTO_CLASSES originals of the DiST release in folders named by their ImageNet class), so
    builds match the folder names to ImageNet classes as they would for a reader's own folder."""
    names = {row["image"]: row["imagenet_name"] for row in csv.DictReader(open(release / "labels.csv"))}
    for image in sorted((release / "original").iterdir())[:PHOTO_CLASSES]:
        folder = photos / names[image.stem]
        folder.mkdir(parents=True)
        shutil.copy(image, folder / image.name)


@pytest.fixture(scope="session")
def page_folders(docs_root):
    """One working folder per page, made on first use: ``T/<page>/work`` beside ``T/<page>/shared``."""
    folders: dict[Path, Path] = {}

    def folder(page: Path) -> Path:
        if page not in folders:
            base = docs_root / page.stem
            work = base / "work"
            work.mkdir(parents=True)
            for name in ("shared", "subset"):
                (base / name).symlink_to(docs_root / name, target_is_directory=True)
            shutil.copytree(docs_root / "photos", work / "photos")
            shutil.copytree(docs_root / "check-photos", work / "check-photos")  # --check-images of the bundled classes
            folders[page] = work
        return folders[page]

    return folder


def block_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    return env


@dataclass(frozen=True)
class BlockRun:
    result: subprocess.CompletedProcess
    seconds: float  # the block's own run time (a test's duration also counts its wait for the pool)


def run_block(block: Block, work: Path) -> BlockRun:
    script = "set -euo pipefail\n" + PREAMBLE + prepared(block.text) + "\n"
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", script], cwd=work, env=block_environment(), capture_output=True,
                            text=True, timeout=BLOCK_TIMEOUT_S)
    return BlockRun(result, time.monotonic() - started)


@pytest.fixture(scope="session")
def block_runs(request, page_folders):
    """The selected blocks that are not skipped, started at once: pages side by side on
    DOCS_WORKERS threads (each page's blocks in order, in its own folder), the longest pages
    first, so the runner takes about as long as its longest page instead of the sum of all."""
    selected = [item.callspec.params["block"] for item in request.session.items
                if item.originalname == "test_documented_block_runs"]
    pages: dict[Path, list[Block]] = {}
    for block in selected:
        if block.key not in SKIPPED:
            pages.setdefault(block.page, []).append(block)
    runs: dict[str, Future] = {block.id: Future() for blocks in pages.values() for block in blocks}

    def run_page(blocks: list[Block]) -> None:
        for block in blocks:
            try:
                runs[block.id].set_result(run_block(block, page_folders(block.page)))
            except Exception as err:  # a timeout: this block fails, the page's next blocks still run
                runs[block.id].set_exception(err)

    with ThreadPoolExecutor(DOCS_WORKERS) as pool:
        for blocks in sorted(pages.values(), key=lambda blocks: -sum(len(b.text) for b in blocks)):
            pool.submit(run_page, blocks)
        yield runs


@pytest.mark.parametrize("block", [pytest.param(block, id=block.id) for block in BLOCKS])
def test_documented_block_runs(block: Block, block_runs, record_property):
    if block.key in SKIPPED:
        pytest.skip(SKIPPED[block.key])
    run = block_runs[block.id].result()
    record_property(BLOCK_SECONDS, run.seconds)
    result = run.result
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        pytest.fail(f"{block.id} exited with {result.returncode}\n--- as run here:\n{prepared(block.text)}\n"
                    f"--- last lines of stderr:\n{tail}", pytrace=False)
