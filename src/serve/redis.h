/* redis: one connection to the Redis server of a fleet (docs/service.md, "Scale-out"), on
 * hiredis, that reconnects by itself.
 *
 * URL: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or unix:///PATH[?db=N] (PORT 6379, DB 0). A
 * password may also come from $CUDA_AGENT_REDIS_PASSWORD (it is not logged either way).
 *
 * redis_cmd runs one command; when the connection is down it connects again first, and a command
 * that fails on a broken connection is tried once more on a fresh one. Errors: CA_ERR_IO (no
 * server, or the connection broke twice), CA_ERR_PARSE (Redis answered an error; the message
 * names it).
 *
 * Threads: a connection belongs to one thread at a time. */
#ifndef CA_SERVE_REDIS_H
#define CA_SERVE_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "util/diag.h"

#define REDIS_URL_MAX 512

struct redis_url {
	char host[256]; /* or the socket's path when unix */
	int port;
	int db;
	bool unix_socket;
	char user[64], password[256]; /* "" when none */
};

struct redis_conn {
	struct redis_url url;
	redisContext *c; /* NULL while disconnected */
	double timeout_s; /* of connecting and of every command but a blocking read's */
};

int redis_url_parse(const char *text, struct redis_url *u, struct ca_diag *d);
/* Connects now (CA_ERR_IO when the server cannot be reached). */
int redis_open(struct redis_conn *r, const char *url, double timeout_s, struct ca_diag *d);
void redis_close(struct redis_conn *r);
/* One command, its arguments given as NULL-terminated strings (argv) with lengths (lens, NULL:
 * strlen); block_s: how long the command may block in the server (XREADGROUP BLOCK, ...), added
 * to the timeout. The reply (freeReplyObject), or NULL with the error in d and *rc. */
redisReply *redis_cmd(struct redis_conn *r, const char *const *argv, const size_t *lens,
		      double block_s, int *rc, struct ca_diag *d);
/* redis_cmd without the reply: 0, or the error. */
int redis_do(struct redis_conn *r, const char *const *argv, const size_t *lens,
	     struct ca_diag *d);

#endif
