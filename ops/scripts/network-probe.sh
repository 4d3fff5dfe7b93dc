#!/usr/bin/env bash
# make verify's network probe (ops/verify_checks.py network_probe_pod), run by bash inside a pod of one tenant:
# opens a TCP connection to HOST:PORT. Exit 0: something accepted it. Exit 1 with bash's own message on stderr,
# which the pod keeps as its termination message: "Connection refused", or a name that does not resolve
# (bash lib/sh/netopen.c). A connection nobody answers (a dropped SYN) never returns: the pod's
# activeDeadlineSeconds stops it.
#
# Environment: HOST (an address or a DNS name) and PORT.
exec 3<>"/dev/tcp/$HOST/$PORT"
