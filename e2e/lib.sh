# Shell helpers of the e2e scripts (control-plane.sh, cluster.sh): free ports and
# the test PKI. Sourced, not run; the sourcing script defines log and die.

# A TCP port on ADDRESS (and 127.0.0.1) that nobody listens on, below the Linux
# ephemeral range (32768+) so outgoing connections do not grab it between the
# check and the bind. Ports handed out before are not handed out again.
port_taken() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
USED_PORTS=""
free_port() { # VAR [ADDRESS]: sets VAR (no command substitution, so USED_PORTS is kept)
  local address=${2:-127.0.0.1} p _
  for _ in $(seq 1 200); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    [[ " $USED_PORTS " == *" $p "* ]] && continue
    if ! port_taken "$address" "$p" && ! port_taken 127.0.0.1 "$p"; then
      USED_PORTS="$USED_PORTS $p"
      printf -v "$1" '%s' "$p"
      return 0
    fi
  done
  die "could not find a free port on $address"
}

# ---------------------------------------------------------------- test PKI
# EC P-256 keys, one CA per control plane, ten-year certificates: these live as
# long as one test run. Each function runs in the PKI directory it is given.

openssl_q() { openssl "$@" >/dev/null 2>&1 || { log "openssl $* failed"; openssl "$@"; }; }

pki_ca() { # DIR CN: DIR/ca.key, DIR/ca.crt
  mkdir -p "$1"
  (
    cd "$1"
    openssl_q genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
    openssl_q req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=$2" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out ca.crt
    chmod 600 ca.key
  )
}

pki_sign() { # DIR NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]: DIR/NAME.key, DIR/NAME.crt
  (
    cd "$1"
    openssl_q genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$2.key"
    openssl_q req -new -key "$2.key" -subj "$3" -out "$2.csr"
    {
      echo "basicConstraints=CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=$4"
      [[ -z ${5:-} ]] || echo "subjectAltName=$5"
    } >"$2.ext"
    openssl_q x509 -req -in "$2.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
      -days 3650 -extfile "$2.ext" -out "$2.crt"
    rm -f "$2.csr" "$2.ext"
    chmod 600 "$2.key"
  )
}

pki_service_account_keys() { # DIR: DIR/sa.key, DIR/sa.pub (RSA, the token signing pair)
  (
    cd "$1"
    openssl_q genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    openssl_q pkey -in sa.key -pubout -out sa.pub
    chmod 600 sa.key
  )
}
