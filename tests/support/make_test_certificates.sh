#!/bin/sh
# A throwaway PKI for the TLS tests, made in directory $1 with Debian's openssl
# (P-256 keys: a fraction of a second). The C++ tests run it through
# tests/support/test_certificates.h, the Python tests through
# python/tests/test_tls.py; the files it makes are listed there.
#   ca NAME SUBJECT           a self-signed CA
#   cert NAME CA DAYS SAN     a certificate signed by CA (SAN "" for none;
#                             DAYS -1: notAfter is yesterday)
set -e
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }
ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
cert() {
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  if [ -n "$4" ]; then printf 'subjectAltName=%s\n' "$4" > "$1.ext"; else : > "$1.ext"; fi
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -out "$1.pem" -days "$3" -extfile "$1.ext"
}
ca ca "ipupod test CA"
ca other-ca "another CA"
cert server ca 2 "IP:127.0.0.1,DNS:localhost"
cert server-dns ca 2 "DNS:localhost"
cert expired ca -1 "IP:127.0.0.1,DNS:localhost"
cert client ca 2 ""
cert other-client other-ca 2 ""
openssl pkey -in server.key -out encrypted.key -aes256 -passout pass:secret
