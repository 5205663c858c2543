/* redis: one reconnecting connection to a fleet's Redis server (redis.h). */
#include "serve/redis.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "util/str.h"

#define REDIS_ARGS_MAX 64

static int parse_int(const char *s, size_t n, int lo, int hi, int *out)
{
	long v = 0;
	if (n == 0 || n > 9)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

int redis_url_parse(const char *text, struct redis_url *u, struct ca_diag *d)
{
	const char *p, *at, *end;
	const char *env = getenv("CUDA_AGENT_REDIS_PASSWORD");

	memset(u, 0, sizeof *u);
	u->port = 6379;
	if (!text || strlen(text) >= REDIS_URL_MAX)
		return ca_fail(d, CA_ERR_INVALID, "a Redis URL of at most %d bytes is needed",
			       REDIS_URL_MAX - 1);
	if (strncmp(text, "unix://", 7) == 0) {
		const char *q = strchr(text + 7, '?');
		size_t n = q ? (size_t)(q - (text + 7)) : strlen(text + 7);
		if (n == 0 || n >= sizeof u->host || text[7] != '/')
			return ca_fail(d, CA_ERR_INVALID, "%s: unix:///PATH names a socket", text);
		memcpy(u->host, text + 7, n);
		u->unix_socket = true;
		if (q && (strncmp(q, "?db=", 4) != 0 ||
			  parse_int(q + 4, strlen(q + 4), 0, 1000000, &u->db)))
			return ca_fail(d, CA_ERR_INVALID, "%s: the only option is ?db=N", text);
	} else {
		if (strncmp(text, "redis://", 8) != 0)
			return ca_fail(d, CA_ERR_INVALID,
				       "%s: a Redis URL is redis://HOST[:PORT][/DB] or unix:///PATH",
				       text);
		p = text + 8;
		end = p + strcspn(p, "/");
		at = memchr(p, '@', (size_t)(end - p));
		if (at) {
			const char *colon = memchr(p, ':', (size_t)(at - p));
			size_t un = colon ? (size_t)(colon - p) : 0;
			size_t pn = colon ? (size_t)(at - colon - 1) : (size_t)(at - p);
			if (un >= sizeof u->user || pn >= sizeof u->password)
				return ca_fail(d, CA_ERR_INVALID, "the Redis URL's user or password is "
								  "too long");
			memcpy(u->user, p, un);
			memcpy(u->password, colon ? colon + 1 : p, pn);
			p = at + 1;
		}
		{
			const char *colon = memchr(p, ':', (size_t)(end - p));
			size_t hn = colon ? (size_t)(colon - p) : (size_t)(end - p);
			if (hn == 0 || hn >= sizeof u->host)
				return ca_fail(d, CA_ERR_INVALID, "%s: no host", text);
			memcpy(u->host, p, hn);
			if (colon && parse_int(colon + 1, (size_t)(end - colon - 1), 1, 65535, &u->port))
				return ca_fail(d, CA_ERR_INVALID, "%s: the port is 1 to 65535", text);
		}
		if (*end == '/' && end[1] && parse_int(end + 1, strlen(end + 1), 0, 1000000, &u->db))
			return ca_fail(d, CA_ERR_INVALID, "%s: /DB is a number", text);
	}
	if (!u->password[0] && env && env[0] && ca_strlcpy(u->password, env, sizeof u->password))
		return ca_fail(d, CA_ERR_INVALID, "$CUDA_AGENT_REDIS_PASSWORD is too long");
	return 0;
}

static struct timeval tv_of(double s)
{
	struct timeval tv = {(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
	return tv;
}

static void drop(struct redis_conn *r)
{
	if (r->c)
		redisFree(r->c);
	r->c = NULL;
}

/* AUTH and SELECT on a fresh connection. */
static int hello(struct redis_conn *r, struct ca_diag *d)
{
	char db[16];
	redisReply *rep;
	if (r->url.password[0]) {
		rep = r->url.user[0] ? redisCommand(r->c, "AUTH %s %s", r->url.user, r->url.password)
				     : redisCommand(r->c, "AUTH %s", r->url.password);
		if (!rep || rep->type == REDIS_REPLY_ERROR) {
			int rc = ca_fail(d, CA_ERR_IO, "Redis refused the password: %s",
					 rep ? rep->str : r->c->errstr);
			if (rep)
				freeReplyObject(rep);
			return rc;
		}
		freeReplyObject(rep);
	}
	if (r->url.db) {
		snprintf(db, sizeof db, "%d", r->url.db);
		rep = redisCommand(r->c, "SELECT %s", db);
		if (!rep || rep->type == REDIS_REPLY_ERROR) {
			int rc = ca_fail(d, CA_ERR_IO, "Redis SELECT %s: %s", db,
					 rep ? rep->str : r->c->errstr);
			if (rep)
				freeReplyObject(rep);
			return rc;
		}
		freeReplyObject(rep);
	}
	return 0;
}

static int connect_now(struct redis_conn *r, struct ca_diag *d)
{
	struct timeval tv = tv_of(r->timeout_s);
	drop(r);
	r->c = r->url.unix_socket ? redisConnectUnixWithTimeout(r->url.host, tv)
				  : redisConnectWithTimeout(r->url.host, r->url.port, tv);
	if (!r->c || r->c->err) {
		int rc = ca_fail(d, CA_ERR_IO, "cannot reach Redis at %s%s%d: %s", r->url.host,
				 r->url.unix_socket ? "" : ":", r->url.unix_socket ? 0 : r->url.port,
				 r->c ? r->c->errstr : "out of memory");
		drop(r);
		return rc;
	}
	/* Not inherited by the worker processes: a node that dies must drop its connections (a
	 * blocked XREADGROUP of a dead node would otherwise still take entries). */
	(void)fcntl(r->c->fd, F_SETFD, FD_CLOEXEC);
	if (redisSetTimeout(r->c, tv) != REDIS_OK || hello(r, d)) {
		drop(r);
		return d->msg[0] ? CA_ERR_IO : ca_fail(d, CA_ERR_IO, "cannot set up the Redis "
								     "connection");
	}
	return 0;
}

int redis_open(struct redis_conn *r, const char *url, double timeout_s, struct ca_diag *d)
{
	int rc;
	memset(r, 0, sizeof *r);
	r->timeout_s = timeout_s > 0 ? timeout_s : 5.0;
	if ((rc = redis_url_parse(url, &r->url, d)))
		return rc;
	return connect_now(r, d);
}

void redis_close(struct redis_conn *r)
{
	drop(r);
}

redisReply *redis_cmd(struct redis_conn *r, const char *const *argv, const size_t *lens,
		      double block_s, int *rc, struct ca_diag *d)
{
	size_t n = 0, len[REDIS_ARGS_MAX];
	while (argv[n] && n < REDIS_ARGS_MAX) {
		len[n] = lens ? lens[n] : strlen(argv[n]);
		n++;
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		redisReply *rep;
		if (!r->c && (*rc = connect_now(r, d)))
			return NULL;
		if (block_s > 0) {
			struct timeval tv = tv_of(r->timeout_s + block_s);
			redisSetTimeout(r->c, tv);
		}
		rep = redisCommandArgv(r->c, (int)n, (const char **)argv, len);
		if (block_s > 0 && r->c && !r->c->err) {
			struct timeval tv = tv_of(r->timeout_s);
			redisSetTimeout(r->c, tv);
		}
		if (rep && rep->type == REDIS_REPLY_ERROR) {
			*rc = ca_fail(d, CA_ERR_PARSE, "Redis %s: %.*s", argv[0], (int)rep->len,
				      rep->str);
			freeReplyObject(rep);
			return NULL;
		}
		if (rep) {
			*rc = 0;
			return rep;
		}
		*rc = ca_fail(d, CA_ERR_IO, "Redis %s: %s", argv[0],
			      r->c && r->c->errstr[0] ? r->c->errstr : "the connection broke");
		drop(r); /* hiredis cannot use a context after an I/O error */
	}
	return NULL;
}

int redis_do(struct redis_conn *r, const char *const *argv, const size_t *lens,
	     struct ca_diag *d)
{
	int rc;
	redisReply *rep = redis_cmd(r, argv, lens, 0, &rc, d);
	if (rep)
		freeReplyObject(rep);
	return rc;
}
