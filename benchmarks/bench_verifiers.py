"""Seconds each built-in verifier takes on 1 MB completions written to be slow (repetition loops, unclosed tags).

    python benchmarks/bench_verifiers.py [--size 1000000] [--repeats 3]

Prints one line per (verifier, completion): the best of `--repeats` runs. The target is under 0.5 s
for every row (issue 32: Knights and Knaves took 5.3 s on 20 KB before, quadratic in the length; issue 38
added the slot reader's worst cases: a loop of closed boxes, braces after a box, answer lines, "####").
"""

from __future__ import annotations

import argparse
import time

from dataflex_callbacks.recipes.tasks.multi_domain_reward import score_knights_knaves, score_math, score_multiple_choice
from dataflex_callbacks.recipes.tasks.verifiers import exact_match, numeric_match

KK_TRUTH = "Bob is a knight, and Zoey is a knave."
VERIFIERS = {  # name -> (completion, reference) -> score
    "math": lambda c: score_math(c, "5"),
    "knights_knaves": lambda c: score_knights_knaves(c, KK_TRUTH),
    "multiple_choice": lambda c: score_multiple_choice(c, "B"),
    "numeric": lambda c: numeric_match(c, "5"),
    "numeric_free_text": lambda c: numeric_match(c, "5", free_text=True),
    "exact": lambda c: exact_match(c, "5"),
}


def completions(size: int) -> dict[str, str]:
    """Completions of about `size` characters, each a loop a small model falls into or a worst case of a parser."""

    def loop(unit: str) -> str:
        return unit * (size // len(unit))

    return {
        "'Bob, ' loop": loop("Bob, "),
        "'Bob is a knight, ' loop": loop("Bob is a knight, "),
        "'a-' loop (one hyphenated word)": loop("a-"),
        "'not 5 ' loop": loop("not 5 "),
        "'1,' loop (digits)": loop("1,"),
        "'<answer>' loop (unclosed)": loop("<answer>"),
        "'\\boxed{' loop (unclosed)": loop("\\boxed{"),
        "'The answer is (A) ' loop": loop("The answer is (A) "),
        "'(' loop": loop("("),
        "'\\boxed{5}' loop (closed boxes)": loop("\\boxed{5}"),
        "'\\boxed{' then '{}' loop (braces)": "\\boxed{" + loop("{}"),
        "'\\nAnswer: 5' loop (answer lines)": loop("\nAnswer: 5"),
        "'#### ' loop": loop("#### "),
        "spaces then an answer": " " * size + "Answer: 5",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="characters per completion (default 1 MB)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; the best is reported")
    args = parser.parse_args()
    score_math("\\boxed{5}", "5")  # math-verify's first call imports sympy: not part of any row
    worst = 0.0
    for name, text in completions(args.size).items():
        for verifier, score in VERIFIERS.items():
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                score(text)
                times.append(time.perf_counter() - start)
            worst = max(worst, min(times))
            print(f"{verifier:16s} {name:34s} {min(times):7.3f} s")
    print(f"slowest row: {worst:.3f} s ({len(text):,} characters)")


if __name__ == "__main__":
    main()
