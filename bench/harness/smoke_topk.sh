#!/usr/bin/env bash
# smoke_topk.sh BENCH - ctest's bench smoke test of distil-bench --topk (labels bench, smoke):
# the top-k workload takes the soft part's options of the dense ones (--divergence, --alpha,
# --beta) and its own --topk-tail (docs/SPEC.md §7), names them in its result line, and computes
# with them: on a tiny cpu shape, each setting must print its own name and give its own loss
# (the CSV's loss column), different from every other setting's. A second or so in all.
set -euo pipefail
bench="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The loss column of a distil-bench CSV with one record, counted from the end (the device's name
# before it may hold commas).
loss_of() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") back = NF - i }
             NR == 2 { print $(NF - back) }' "$1"
}

run() { # name expected-in-result-line flags...
    local name="$1" want="$2"
    shift 2
    "$bench" --backend cpu --preset cpu --workload fused --mode forward --fused-T 8 --fused-V 300 \
        --Hs 16 --topk 8 --warmup 0 --reps 1 --min-time 0 --sets 1 --peak-bw-tbs 1 \
        --peak-tflops 1 --quiet --csv "$tmp/$name.csv" "$@" >"$tmp/$name.out"
    local line
    line="$(grep '^topk ' "$tmp/$name.out")"
    if [[ "$line" != *"$want" ]]; then
        echo "FAIL $name: result line does not end in '$want': $line"
        exit 1
    fi
    loss_of "$tmp/$name.csv" >"$tmp/$name.loss"
    if [ -z "$(cat "$tmp/$name.loss")" ]; then
        echo "FAIL $name: no finite loss in the CSV"
        exit 1
    fi
    echo "$name: $line, loss $(cat "$tmp/$name.loss")"
}

run default "forward_kl k=8 tail"
run rkl "reverse_kl k=8 tail" --divergence reverse_kl
run jsd "jsd b=0.25 k=8 tail" --divergence jsd --beta 0.25
run skew "skew_kl a=0.5 k=8 tail" --divergence skew_kl --alpha 0.5
run renorm "forward_kl k=8 renormalise" --topk-tail renormalise
run zero "forward_kl k=8 zero" --topk-tail zero

names=(default rkl jsd skew renorm zero)
for ((i = 0; i < ${#names[@]}; i++)); do
    for ((j = i + 1; j < ${#names[@]}; j++)); do
        a="$(cat "$tmp/${names[i]}.loss")" b="$(cat "$tmp/${names[j]}.loss")"
        if [ "$a" = "$b" ]; then
            echo "FAIL ${names[i]} and ${names[j]} give the same loss $a: an option is ignored"
            exit 1
        fi
    done
done
echo "PASS"
