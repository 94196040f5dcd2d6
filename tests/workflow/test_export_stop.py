"""The exported CLI parses every number strictly and reports why a generation stopped; the C API
has the stop reason (``gpt2_last_stop``) and refuses what it cannot run with an error code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from export_helpers import run_cli

from caten_lab.models.sampling import SamplingOptions

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"
N_CTX = 128
EOS_PROMPT = "The king said"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from caten_lab.workflow.export import export, generation_workflow
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    wf = generation_workflow(MODEL, n_ctx=N_CTX)
    tok = GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")
    # the tiny model never emits its end-of-text token (0): export with EOS = a token that the greedy
    # continuation of EOS_PROMPT reaches, so that the eos stop can be observed
    greedy = list(wf.runner.stream(tok.encode(EOS_PROMPT), 40, SamplingOptions()))
    k = next(k for k in range(2, len(greedy)) if greedy[k] not in greedy[:k])
    wf.runner.config.eos_token_id = greedy[k]
    out = export(wf, tmp_path_factory.mktemp("gpt2_stop"))
    return wf.runner, tok, out, k + 1


BAD_NUMBERS = [
    (["--tokens", "abc"], "--tokens takes an integer in 0..2147483647, got 'abc'"),
    (["--tokens", "12abc"], "--tokens takes an integer in 0..2147483647, got '12abc'"),
    (["--tokens", ""], "--tokens takes an integer in 0..2147483647, got ''"),
    (["--tokens", "-3"], "--tokens takes an integer in 0..2147483647, got '-3'"),
    (["--tokens", "2147483648"], "--tokens takes an integer in 0..2147483647, got '2147483648'"),
    (["--tokens", "99999999999999999999999"], "got '99999999999999999999999'"),
    (["--tokens", "1.5"], "--tokens takes an integer in 0..2147483647, got '1.5'"),
    (["--top-k", "ten"], "--top-k takes an integer in 0..2147483647, got 'ten'"),
    (["--seed", "abc"], "--seed takes an integer in 0..18446744073709551615, got 'abc'"),
    (["--seed", "-1"], "--seed takes an integer in 0..18446744073709551615, got '-1'"),
    (["--seed", "18446744073709551616"], "got '18446744073709551616'"),
    (["--seed", " 7"], "got ' 7'"),
    (["--temperature", "hot"], "--temperature takes a finite number, got 'hot'"),
    (["--temperature", "0.8x"], "--temperature takes a finite number, got '0.8x'"),
    (["--temperature", "nan"], "--temperature takes a finite number, got 'nan'"),
    (["--top-p", "inf"], "--top-p takes a finite number, got 'inf'"),
    (["--repetition-penalty", "1e999"], "--repetition-penalty takes a finite number, got '1e999'"),
    (["--tokens"], "--tokens needs a value"),
    (["--frobnicate", "1"], "unknown option --frobnicate"),
    (["stray"], "unexpected argument 'stray'"),
]


@pytest.mark.parametrize(("args", "msg"), BAD_NUMBERS, ids=[" ".join(a) or "empty" for a, _ in BAD_NUMBERS])
def test_cli_numbers_are_parsed_strictly(exported, args: list[str], msg: str) -> None:
    out = exported[2]
    r = run_cli(out.cli, "--weights", str(MODEL), *args)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)  # a bad command line: nothing generated
    assert r.stderr.startswith("error (argument): ") and msg in r.stderr.splitlines()[0], r.stderr
    assert r.stdout == ""


def test_cli_numbers_in_range_still_work(exported) -> None:
    runner, tok, out, _ = exported
    want = list(runner.stream(tok.encode("Hi"), 4, SamplingOptions(0.7, top_k=9, seed=2**64 - 1)))
    r = run_cli(out.cli, "--weights", str(MODEL), "--prompt", "Hi", "--tokens", "4", "--ids",
                "--temperature", "0.7", "--top-k", "9", "--seed", "18446744073709551615", "--no-eos-stop")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    assert r.stderr == ""  # max_tokens: the reason asked for, so nothing is said


def test_cli_reports_the_context_limit(exported) -> None:
    runner, tok, out, _ = exported
    prompt = "a " * 100
    n_prompt = len(tok.encode(prompt))
    want = list(runner.stream(tok.encode(prompt), 500, SamplingOptions()))
    assert runner.stats.stop_reason == "context_limit"
    r = run_cli(out.cli, "--weights", str(MODEL), "--prompt", prompt, "--tokens", "500", "--ids", "--no-eos-stop")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    got = N_CTX - n_prompt + 1
    assert len(want) == got
    assert r.stderr == f"stopped: context_limit after {got} of 500 tokens (the model's context is {N_CTX})\n"


def test_cli_huge_token_count_stops_at_the_context(exported) -> None:
    """--tokens 2147483647 needs no history of that size: at most the context is generated."""
    out = exported[2]
    r = run_cli(out.cli, "--weights", str(MODEL), "--prompt", "Hi", "--tokens", "2147483647", "--ids", "--no-eos-stop")
    assert r.returncode == 0, r.stderr
    got = N_CTX - len(exported[1].encode("Hi")) + 1
    assert len(r.stdout.split()) == got
    assert r.stderr == f"stopped: context_limit after {got} of 2147483647 tokens (the model's context is {N_CTX})\n"


C_CLIENT = r"""
#include <stdio.h>
#include <string.h>
#include "gpt2.h"
static int stop_after_2(int32_t id, const char *text, size_t len, void *user) {
  int *n = user; (void)id; (void)text; (void)len; return ++*n >= 2;
}
static void show(gpt2_ctx *ctx, const char *what, int rc) {
  int64_t n = -1;
  gpt2_stop_reason why = gpt2_last_stop(ctx, &n);
  printf("%s rc=%s stop=%s n=%lld\n", what, gpt2_error_name(rc), gpt2_stop_reason_name(why), (long long)n);
}
int main(int argc, char **argv) {
  int err = -1;
  gpt2_ctx *ctx = gpt2_init(argv[1], NULL, NULL, &err);
  if (!ctx) { printf("init failed %s\n", gpt2_last_error(NULL)); return 1; }
  show(ctx, "fresh", 0);
  gpt2_options o; gpt2_default_options(&o);
  o.max_new_tokens = 5; o.stop_at_eos = 0;
  show(ctx, "max", gpt2_generate(ctx, "Hi", &o, NULL, NULL));
  char prompt[512] = {0};
  for (int i = 0; i < 100; i++) strcat(prompt, "a ");
  o.max_new_tokens = 500;
  show(ctx, "ctx", gpt2_generate(ctx, prompt, &o, NULL, NULL));
  int count = 0;
  show(ctx, "cb", gpt2_generate(ctx, "Hi", &o, stop_after_2, &count));
  o.max_new_tokens = 0;
  show(ctx, "zero", gpt2_generate(ctx, "Hi", &o, NULL, NULL));
  o.max_new_tokens = -1;
  show(ctx, "bad", gpt2_generate(ctx, "Hi", &o, NULL, NULL));
  o.max_new_tokens = 200; o.stop_at_eos = 1;
  show(ctx, "eos", gpt2_generate(ctx, argv[2], &o, NULL, NULL));
  printf("null %s\n", gpt2_stop_reason_name(gpt2_last_stop(NULL, NULL)));
  int64_t count_only = -1;
  int rc_null = gpt2_tokenize(ctx, "Hi there", NULL, 5, &count_only);
  int rc_count = gpt2_tokenize(ctx, "Hi there", NULL, 0, &count_only);
  printf("tokenize %s %s %lld\n", gpt2_error_name(rc_null), gpt2_error_name(rc_count), (long long)count_only);
  gpt2_free(ctx);
  return 0;
}
"""


def _client(out, tmp_path: Path) -> Path:
    src = tmp_path / "stop_client.c"
    src.write_text(C_CLIENT)
    exe = tmp_path / "stop_client"
    subprocess.run(
        ["cc", "-O1", "-Wall", "-Werror", f"-I{out.directory}", "-o", str(exe), str(src),
         f"-L{out.directory}", "-lgpt2", f"-Wl,-rpath,{out.directory}"],
        check=True,
        capture_output=True,
    )
    return exe


def test_c_api_stop_reasons(exported, tmp_path) -> None:
    _, tok, out, n_eos = exported
    exe = _client(out, tmp_path)
    r = subprocess.run([str(exe), str(MODEL), EOS_PROMPT], capture_output=True, text=True, env={}, timeout=120)
    assert r.returncode == 0, r.stderr
    n_ctx_left = N_CTX - len(tok.encode("a " * 100)) + 1
    assert r.stdout.splitlines() == [
        "fresh rc=ok stop=none n=0",
        "max rc=ok stop=max_tokens n=5",
        f"ctx rc=ok stop=context_limit n={n_ctx_left}",
        "cb rc=ok stop=callback n=2",
        "zero rc=ok stop=max_tokens n=0",
        "bad rc=argument stop=none n=0",
        f"eos rc=ok stop=eos n={n_eos}",
        "null none",
        f"tokenize argument ok {len(tok.encode('Hi there'))}",  # ids NULL with cap > 0: an error, not a crash
    ]


def test_cli_reports_eos(exported) -> None:
    runner, tok, out, n_eos = exported
    want = list(runner.stream(tok.encode(EOS_PROMPT), 200, SamplingOptions(), stop_tokens=[runner.config.eos_token_id]))
    assert len(want) == n_eos
    r = run_cli(out.cli, "--weights", str(MODEL), "--prompt", EOS_PROMPT, "--tokens", "200", "--ids")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    assert r.stderr == f"stopped: eos after {n_eos} of 200 tokens\n"
