#!/usr/bin/env bash
# Sealed vs plain verbs (the emulated Apple TB5 device, staged UC path): bandwidth and the CPU
# budget of sealing, as bench/sealed_tcp.sh measures them for tcp (same method, same output).
#   bench/sealed_verbs.sh [BUILD_DIR]        env: REPS=5 SIZE=1M BW_TIME=2
FABRIC=verbs exec "$(dirname "$0")/sealed_tcp.sh" "$@"
