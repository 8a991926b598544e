"""Loaders of Speech Commands, MNIST, BIDMC and sCIFAR on tiny fixtures written in each dataset's
official on-disk layout, and the download CLI's offline paths (argument handling, already present,
checksum refusal)."""
from __future__ import annotations

import gzip
import hashlib
import io
import math
import pickle
import struct
import tarfile
import urllib.request
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from runners.data.cache import CACHE_DIRNAME
from runners.data import download as dl
from runners.data.base import DatasetError
from runners.data.bidmc import load_bidmc, read_ts_regression, sklearn_style_split
from runners.data.mnist import load_mnist, mnist_permutation, read_idx
from runners.data.speech_commands import MFCC_PARAMS, load_speech_commands, mfcc_features

# ----------------------------------------------------------------------------------------------
# Speech Commands fixture: <root>/speech_commands/<word>/<id>_nohash_<k>.wav for all 35 words.

SC_FILES_PER_WORD = 4  # k = 0: validation list, k = 1: testing list, k = 2, 3: train


def _write_wav(path: Path, samples: np.ndarray, rate: int = 16000, channels: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())


@pytest.fixture
def sc_root(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "speech_commands"
    val, test = [], []
    for w_i, word in enumerate(dl.SPEECH_COMMANDS_WORDS):
        for k in range(SC_FILES_PER_WORD):
            # some clips are shorter than 1 s (as in the real data): they must be zero-padded
            n = 16000 if (w_i + k) % 3 else 12000 + 37 * w_i
            rel = f"{word}/{w_i:08x}_nohash_{k}.wav"
            _write_wav(folder / rel, rng.integers(-3000, 3000, n))
            (val if k == 0 else test if k == 1 else []).append(rel)
    # _background_noise_ holds long files (here: stereo, which read_wav would refuse): must be ignored
    _write_wav(folder / "_background_noise_" / "white_noise.wav", rng.integers(-10, 10, 64000), channels=2)
    (folder / "validation_list.txt").write_text("\n".join(val) + "\n")
    (folder / "testing_list.txt").write_text("\n".join(test) + "\n")
    (folder / "README.md").write_text("fixture\n")
    return tmp_path


def _wav_int16(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def test_sc35_raw_splits_follow_official_lists(sc_root: Path) -> None:
    task = load_speech_commands(sc_root, subset="sc35", features="raw", cache=False)
    assert (task.d_output, task.d_input, task.seq_len) == (35, 1, 16000)
    assert (len(task.train), len(task.val), len(task.test)) == (35 * 2, 35, 35)
    folder = sc_root / "speech_commands"
    # order within a split: by label, then file name; check every item against its WAV file
    for split, ks in (("train", (2, 3)), ("val", (0,)), ("test", (1,))):
        ds = getattr(task, split)
        i = 0
        for label, word in enumerate(dl.SPEECH_COMMANDS_WORDS):
            for k in ks:
                x, y = ds[i]
                assert x.shape == (16000, 1) and int(y) == label
                raw = _wav_int16(folder / f"{word}/{label:08x}_nohash_{k}.wav").astype(np.float64) / 32768
                want = np.zeros(16000)
                want[: len(raw)] = raw  # zero padding at the end
                got = x[:, 0].double().numpy() * ds.std + ds.mean
                np.testing.assert_allclose(got, want, atol=1e-6)
                i += 1
    # normalisation: train mean 0, std 1 over every train sample
    allx = torch.stack([task.train[i][0] for i in range(len(task.train))]).double()
    assert abs(allx.mean().item()) < 1e-5 and abs(allx.std().item() - 1) < 1e-3


def test_sc10_subset_has_ten_classes(sc_root: Path) -> None:
    task = load_speech_commands(sc_root, subset="sc10", cache=False)
    assert task.d_output == 10 and task.info["classes"] == list(dl.SC10_WORDS)
    labels = {int(task.train[i][1]) for i in range(len(task.train))}
    assert labels == set(range(10))
    assert (len(task.train), len(task.val), len(task.test)) == (20, 10, 10)


def test_half_rate_test_is_naive_decimation(sc_root: Path) -> None:
    full = load_speech_commands(sc_root, subset="sc10", cache=False)
    half = load_speech_commands(sc_root, subset="sc10", test_decimation=2, cache=False)
    assert half.info["test_rate"] == 2.0 and half.info["test_seq_len"] == 8000
    x_half, y_half = half.test[3]
    x_full, y_full = full.test[3]
    assert x_half.shape == (8000, 1) and int(y_half) == int(y_full)
    torch.testing.assert_close(x_half, x_full[::2])  # every other sample, no filter
    assert half.train[0][0].shape == (16000, 1) and half.val[0][0].shape == (16000, 1)
    with pytest.raises(ValueError, match="raw"):
        load_speech_commands(sc_root, features="mfcc", test_decimation=2, cache=False)


def _mfcc_reference(x: torch.Tensor) -> torch.Tensor:
    """float64 MFCC written out from the definition (torchaudio's MFCC defaults), independent of
    runners/data/mfcc.py: x (B, 16000) -> (B, 161, 20)."""
    n_fft, hop, n_mels, n_mfcc, sr = 200, 100, 64, 20, 16000
    win = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
    spec = torch.stft(x, n_fft, hop, n_fft, win, center=True, pad_mode="reflect", return_complex=True)
    power = spec.abs() ** 2  # (B, 101, 161)
    hz2mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731 (HTK scale)
    m_pts = torch.linspace(hz2mel(0.0), hz2mel(sr / 2), n_mels + 2, dtype=torch.float64)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    lo, ce, hi = f_pts[:-2, None], f_pts[1:-1, None], f_pts[2:, None]
    fb = torch.clamp(torch.minimum((freqs - lo) / (ce - lo), (hi - freqs) / (hi - ce)), min=0)  # (64, 101)
    log_mel = torch.log(fb @ power + 1e-6)  # (B, 64, 161)
    n = torch.arange(n_mels, dtype=torch.float64)
    k = torch.arange(n_mfcc, dtype=torch.float64)[:, None]
    dct = torch.cos(math.pi / n_mels * (n + 0.5) * k) * math.sqrt(2.0 / n_mels)
    dct[0] /= math.sqrt(2.0)  # orthonormal DCT-II, (20, 64)
    return (dct @ log_mel).transpose(-1, -2)  # (B, 161, 20)


def test_mfcc_matches_definition_and_shape(sc_root: Path) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 16000, generator=gen, dtype=torch.float64) * 0.1
    x[2, 9000:] = 0.0  # a zero-padded clip: the log offset matters there
    got = torch.from_numpy(mfcc_features(x.float().numpy())).double()
    want = _mfcc_reference(x)
    assert got.shape == want.shape == (3, 161, 20)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=2e-3)
    assert MFCC_PARAMS["n_fft"] == 200 and MFCC_PARAMS["hop_length"] == 100 and MFCC_PARAMS["n_mels"] == 64

    task = load_speech_commands(sc_root, subset="sc10", features="mfcc", cache=False)
    assert (task.seq_len, task.d_input) == (161, 20)
    xs = torch.stack([task.train[i][0] for i in range(len(task.train))])
    assert xs.shape == (20, 161, 20)
    flat = xs.reshape(-1, 20).double()  # per-coefficient train normalisation
    assert flat.mean(0).abs().max() < 1e-4 and (flat.std(0) - 1).abs().max() < 1e-3


def test_mfcc_equals_librosa_reference_numbers() -> None:
    """Values computed once with librosa 0.11 (melspectrogram with htk=True, norm=None, then log(mel + 1e-6)
    and an orthonormal DCT-II, the parameters of MFCC_PARAMS) on two deterministic signals: a two-tone mix and
    a chirp zero-padded after 9000 samples. The suite no longer depends on librosa; these pin its numbers."""
    t = np.arange(16000) / 16000
    x = np.stack([0.3 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3000 * t),
                  0.2 * np.sin(2 * np.pi * (100 + 2000 * t) * t)])
    x[1, 9000:] = 0.0
    got = mfcc_features(x)  # (2, 161, 20)
    want_tones = [[-10.353106, 8.105993, 2.530915, 1.022671, -15.636595, -9.823811],  # frames 0, 80, 160
                  [-65.9924, 26.864395, 2.140032, 5.970273, -23.045261, -21.839245],
                  [-14.60318, 13.164856, 0.985306, -2.4441, -13.685724, -6.402289]]
    want_chirp = [[-47.78696, 23.368828, 2.754921, -0.418462, -2.367696, -3.283891],  # frames 0, 50, 120
                  [-91.724045, 6.921937, -20.83023, -15.307829, 9.892269, 15.392384],
                  [-110.52408, 0.0, 0.0, 0.0, 0.0, 0.0]]
    assert got.shape == (2, 161, 20) and got.dtype == np.float32
    np.testing.assert_allclose(got[0, [0, 80, 160], :6], want_tones, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1, [0, 50, 120], :6], want_chirp, rtol=1e-4, atol=1e-4)


def test_sc_cache_roundtrip(sc_root: Path) -> None:
    a = load_speech_commands(sc_root, subset="sc10", cache=True)
    files = list((sc_root / CACHE_DIRNAME).glob("speech_commands-sc10-raw-*.pt"))
    assert len(files) == 1
    b = load_speech_commands(sc_root, subset="sc10", cache=True)
    torch.testing.assert_close(a.test[4][0], b.test[4][0])
    assert a.info["sizes"] == b.info["sizes"]


def test_sc_errors_name_the_path(sc_root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(DatasetError, match=r"speech_commands.*python -m runners\.data\.download speech_commands"):
        load_speech_commands(empty)
    folder = sc_root / "speech_commands"
    (folder / "testing_list.txt").rename(folder / "testing_list.bak")
    with pytest.raises(DatasetError, match="testing_list.txt"):
        load_speech_commands(sc_root, cache=False)
    (folder / "testing_list.bak").rename(folder / "testing_list.txt")
    # a list entry whose file is gone (incomplete extraction)
    gone = folder / "yes" / f"{dl.SPEECH_COMMANDS_WORDS.index('yes'):08x}_nohash_1.wav"
    gone.unlink()
    with pytest.raises(DatasetError, match="testing_list.txt names 1 files"):
        load_speech_commands(sc_root, cache=False)
    _write_wav(gone, np.zeros(16000), rate=8000)  # wrong sample rate
    with pytest.raises(DatasetError, match=str(gone.name)):
        load_speech_commands(sc_root, cache=False)


# ----------------------------------------------------------------------------------------------
# MNIST fixture: LeCun IDX files, train as .gz, test raw.

def _idx_bytes(arr: np.ndarray) -> bytes:
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


@pytest.fixture
def mnist_root(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for prefix, n, gz in (("train", 50, True), ("t10k", 20, False)):
        imgs = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        for kind, arr, idx in (("images", imgs, 3), ("labels", labels, 1)):
            name = f"{prefix}-{kind}-idx{idx}-ubyte"
            data = _idx_bytes(arr)
            if gz:
                (folder / (name + ".gz")).write_bytes(gzip.compress(data))
            else:
                (folder / name).write_bytes(data)
    return tmp_path


def test_smnist_reads_idx_and_holds_out_val(mnist_root: Path) -> None:
    task = load_mnist(mnist_root, cache=False)
    imgs = read_idx(mnist_root / "mnist" / "train-images-idx3-ubyte.gz").reshape(50, 784)
    labels = read_idx(mnist_root / "mnist" / "train-labels-idx1-ubyte.gz")
    assert (task.seq_len, task.d_input, task.d_output) == (784, 1, 10)
    assert (len(task.train), len(task.val), len(task.test)) == (45, 5, 20)
    # the split is torch.utils.data.random_split(train, (45, 5), generator seeded 42), as the S4 code
    tr_sub, va_sub = torch.utils.data.random_split(range(50), (45, 5), generator=torch.Generator().manual_seed(42))
    for ds, sub in ((task.train, tr_sub), (task.val, va_sub)):
        for i, j in enumerate(list(sub)):
            x, y = ds[i]
            assert x.shape == (784, 1) and int(y) == int(labels[j])
            torch.testing.assert_close(x[:, 0], torch.from_numpy(imgs[j]).float() / 255)
    test_imgs = read_idx(mnist_root / "mnist" / "t10k-images-idx3-ubyte")
    torch.testing.assert_close(task.test[7][0][:, 0], torch.from_numpy(test_imgs[7].reshape(-1)).float() / 255)


def test_pmnist_permutation_fixed_and_seeded(mnist_root: Path) -> None:
    s = load_mnist(mnist_root, cache=False)
    p1 = load_mnist(mnist_root, permute=True, cache=True)
    p2 = load_mnist(mnist_root, permute=True, cache=True)  # from the cache this time
    p3 = load_mnist(mnist_root, permute=True, perm_seed=1, cache=False)
    perm = mnist_permutation(0)
    assert sorted(perm.tolist()) == list(range(784)) and p1.info["permutation_seed"] == 0
    for i in (0, 3):
        torch.testing.assert_close(p1.train[i][0], p2.train[i][0])
        torch.testing.assert_close(p1.train[i][0], s.train[i][0][perm])
    assert not torch.equal(p1.test[0][0], p3.test[0][0])
    assert not torch.equal(mnist_permutation(0), mnist_permutation(1))


def test_mnist_errors_name_the_path(mnist_root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.raises(DatasetError, match=r"mnist.*python -m runners\.data\.download mnist"):
        load_mnist(tmp_path_factory.mktemp("nothing"))
    f = mnist_root / "mnist" / "t10k-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])  # truncated
    with pytest.raises(DatasetError, match=r"t10k-images-idx3-ubyte holds .*\(truncated"):
        load_mnist(mnist_root, cache=False)
    f.unlink()
    with pytest.raises(DatasetError, match="lacks t10k-images-idx3-ubyte"):
        load_mnist(mnist_root, cache=False)


# ----------------------------------------------------------------------------------------------
# BIDMC fixture: TSER .ts text files.

def _write_ts(path: Path, x: np.ndarray, y: np.ndarray, problem: str, header: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = header if header is not None else (
        f"#Fixture in the TSER layout\n@problemName {problem}\n@timeStamps false\n@missing false\n"
        f"@univariate false\n@dimensions {x.shape[2]}\n@equalLength true\n@seriesLength {x.shape[1]}\n"
        "@targetlabel true\n@data\n")
    lines = [":".join(",".join(f"{v:.6g}" for v in x[i, :, d]) for d in range(x.shape[2])) + f":{y[i]:.6g}"
             for i in range(len(y))]
    path.write_text(head + "\n".join(lines) + "\n")


@pytest.fixture
def bidmc_root(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "bidmc" / "BIDMC32HR"
    for part, n in (("TRAIN", 12), ("TEST", 5)):
        x = rng.normal(size=(n, 4000, 2)).round(4)
        y = rng.uniform(60, 120, n).round(3)
        _write_ts(folder / f"BIDMC32HR_{part}.ts", x, y, "BIDMC32HR")
    return tmp_path


def test_bidmc_reads_ts_and_splits(bidmc_root: Path) -> None:
    folder = bidmc_root / "bidmc" / "BIDMC32HR"
    tr_x, tr_y = read_ts_regression(folder / "BIDMC32HR_TRAIN.ts")
    te_x, te_y = read_ts_regression(folder / "BIDMC32HR_TEST.ts")
    assert tr_x.shape == (12, 4000, 2) and te_y.shape == (5,)
    task = load_bidmc(bidmc_root, target="HR", cache=False)
    assert (task.task_type, task.d_output, task.d_input, task.seq_len) == ("regression", 1, 2, 4000)
    assert task.info["metric"] == "rmse"
    assert (len(task.train), len(task.val), len(task.test)) == (10, 2, 5)
    x, y = task.test[4]
    assert x.shape == (4000, 2) and y.shape == (1,)
    torch.testing.assert_close(x, torch.from_numpy(te_x[4]))
    assert abs(float(y) - te_y[4]) < 1e-3  # raw target, not normalised (as the S4 code)
    got_train = sorted(float(task.train[i][1]) for i in range(10)) + sorted(float(task.val[i][1]) for i in range(2))
    assert sorted(got_train) == pytest.approx(sorted(tr_y.astype(np.float32).tolist()))
    normed = load_bidmc(bidmc_root, target="HR", normalize_targets=True, cache=False)
    ys = torch.stack([normed.train[i][1] for i in range(10)])
    assert abs(ys.mean().item()) < 1e-5 and abs(ys.std().item() - 1) < 1e-5


def test_bidmc_reshuffle_matches_sklearn(bidmc_root: Path) -> None:
    sk = pytest.importorskip("sklearn.model_selection")
    for n in (17, 40, 101):
        idx = np.arange(n)
        want_tr, want_te = sk.train_test_split(idx, test_size=0.3, random_state=0)
        got_tr, got_te = sklearn_style_split(n, 0.3, 0)
        assert np.array_equal(got_tr, want_tr) and np.array_equal(got_te, want_te)
    task = load_bidmc(bidmc_root, target="HR", split="reshuffle", cache=True)
    folder = bidmc_root / "bidmc" / "BIDMC32HR"
    all_y = np.concatenate([read_ts_regression(folder / f"BIDMC32HR_{p}.ts")[1] for p in ("TRAIN", "TEST")])
    y_tr, y_ev = sk.train_test_split(all_y, test_size=0.3, random_state=0)
    y_va, y_te = sk.train_test_split(y_ev, test_size=0.5, random_state=1)
    for ds, want in ((task.train, y_tr), (task.val, y_va), (task.test, y_te)):
        got = np.array([float(ds[i][1]) for i in range(len(ds))])
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bidmc_errors_name_the_path(bidmc_root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.raises(DatasetError, match=r"BIDMC32HR.*python -m runners\.data\.download bidmc"):
        load_bidmc(tmp_path_factory.mktemp("nothing"), target="HR")
    f = bidmc_root / "bidmc" / "BIDMC32HR" / "BIDMC32HR_TEST.ts"
    x, y = np.zeros((2, 4000, 2)), np.array([70.0, 80.0])
    _write_ts(f, x, y, "BIDMC32HR", header="@problemName BIDMC32RR\n@timeStamps false\n@univariate false\n"
                                           "@targetlabel true\n@data\n")
    with pytest.raises(DatasetError, match=r"BIDMC32HR_TEST\.ts.*@problemName is 'BIDMC32RR'"):
        load_bidmc(bidmc_root, target="HR", cache=False)
    _write_ts(f, x, y, "BIDMC32HR", header="@problemName BIDMC32HR\n@timeStamps false\n@univariate false\n"
                                           "@classLabel true 0 1\n@data\n")
    with pytest.raises(DatasetError, match=r"BIDMC32HR_TEST\.ts, line 4: @classLabel true"):
        load_bidmc(bidmc_root, target="HR", cache=False)
    _write_ts(f, x[:, :3000], y, "BIDMC32HR")  # wrong series length
    with pytest.raises(DatasetError, match=r"BIDMC32HR_TEST\.ts"):
        load_bidmc(bidmc_root, target="HR", cache=False)
    f.unlink()
    with pytest.raises(DatasetError, match=r"missing .*BIDMC32HR_TEST\.ts"):
        load_bidmc(bidmc_root, target="HR", cache=False)


# ----------------------------------------------------------------------------------------------
# sCIFAR fixture: CIFAR-10 python batches (pickled dicts with bytes keys, channel-major rows).

@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
                 b"labels": rng.integers(0, 10, 4).tolist(), b"batch_label": name.encode()}
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
    return tmp_path


def test_scifar_sequences_and_augmentation(cifar_root: Path) -> None:
    from runners.data.cifar import load_cifar10
    from runners.data.scifar import CIFAR_MEAN, CIFAR_STD, load_scifar, random_crop_flip

    imgs, labels = load_cifar10(cifar_root, "test")
    task = load_scifar(cifar_root, cache=False)
    assert (task.seq_len, task.d_input, task.d_output) == (1024, 3, 10)
    assert (len(task.train), len(task.val), len(task.test)) == (18, 2, 4)
    x, y = task.test[1]
    want = (torch.from_numpy(imgs[1]).double() / 255 - torch.tensor(CIFAR_MEAN, dtype=torch.float64)) \
        / torch.tensor(CIFAR_STD, dtype=torch.float64)
    assert x.shape == (1024, 3) and int(y) == labels[1]
    torch.testing.assert_close(x.double(), want.reshape(1024, 3), rtol=1e-5, atol=1e-5)

    # augmentation: each output is one of the 9 x 9 x 2 crops/flips of the symmetric-padded image
    img = torch.from_numpy(imgs[0])
    padded = np.pad(imgs[0], ((4, 4), (4, 4), (0, 0)), mode="symmetric")
    candidates = [np.ascontiguousarray(c[:, ::-1] if f else c) for t in range(9) for le in range(9)
                  for f in (0, 1) for c in [padded[t:t + 32, le:le + 32]]]
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(40):
        out = random_crop_flip(img, generator=gen).numpy()
        hits = [k for k, c in enumerate(candidates) if np.array_equal(out, c)]
        assert hits, "augmented image is not a crop/flip of the padded original"
        seen.add(hits[0])
    assert len(seen) > 10  # it does vary

    aug = load_scifar(cifar_root, augment=True, cache=True)
    torch.manual_seed(0)
    draws = torch.stack([aug.train[0][0] for _ in range(8)])
    assert not all(torch.equal(draws[0], d) for d in draws[1:])  # train items are augmented
    torch.testing.assert_close(aug.val[1][0], task.val[1][0])  # val and test are not
    torch.testing.assert_close(aug.test[2][0], task.test[2][0])


# ----------------------------------------------------------------------------------------------
# Download CLI: offline paths only.

def _no_network(*args, **kwargs):
    raise AssertionError("the download step touched the network")


def test_download_cli_arguments(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        dl.main(["imagenet", "--data", "x"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        dl.main([])
    assert exc.value.code == 2
    with pytest.raises(ValueError, match="unknown dataset"):
        dl.download("imagenet", Path("."))


def test_download_skips_present_datasets(mnist_root: Path, bidmc_root: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    assert dl.main(["mnist", "--data", str(mnist_root)]) == 0
    assert "mnist: already present" in capsys.readouterr().out
    assert not dl.is_present(bidmc_root, "bidmc")  # only HR is in the fixture: RR and SpO2 are missing
    for t in ("RR", "SpO2"):
        for p in ("TRAIN", "TEST"):
            src = bidmc_root / "bidmc" / "BIDMC32HR" / f"BIDMC32HR_{p}.ts"
            dst = bidmc_root / "bidmc" / f"BIDMC32{t}" / f"BIDMC32{t}_{p}.ts"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    assert dl.main(["bidmc", "mnist", "--data", str(bidmc_root)]) == 0
    out = capsys.readouterr().out
    assert "bidmc: already present" in out and "mnist: already present" in out


def test_download_verifies_checksum_and_extracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        payload = b"hello"
        info = tarfile.TarInfo("top/file.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    blob = buf.getvalue()
    monkeypatch.setattr(urllib.request, "urlopen", lambda url: io.BytesIO(blob))
    good = dl.Resource("https://example.invalid/a.tar.gz", "a.tar.gz", "sub",
                       ("sha256", hashlib.sha256(blob).hexdigest()), extract=True)
    dl._fetch(good, tmp_path, log=lambda s: None)
    assert (tmp_path / "sub" / "top" / "file.txt").read_bytes() == b"hello"
    assert not (tmp_path / "sub" / "a.tar.gz").exists()  # the archive is removed after extraction
    bad = dl.Resource("https://example.invalid/b.tar.gz", "b.tar.gz", "sub2", ("md5", "0" * 32), extract=True)
    with pytest.raises(RuntimeError, match="checksum"):
        dl._fetch(bad, tmp_path, log=lambda s: None)
    assert list((tmp_path / "sub2").iterdir()) == []  # nothing kept
