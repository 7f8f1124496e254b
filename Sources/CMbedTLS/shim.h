// CMbedTLS: mbedTLS 2.28 from libmbedtls-dev (no pkg-config file). Imported only by ShoalTLS.
#include <mbedtls/version.h>
#include <mbedtls/sha256.h>
#include <mbedtls/error.h>
#include <mbedtls/entropy.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/pk.h>
#include <mbedtls/ecp.h>
#include <mbedtls/x509_crt.h>
#include <mbedtls/x509_csr.h>
#include <mbedtls/asn1write.h>
#include <mbedtls/oid.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_cache.h>
#include <mbedtls/pem.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/bignum.h>
