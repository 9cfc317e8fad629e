package redact

// Case is one secret in the context it is typically found in.
type Case struct {
	Name   string
	Text   string // the text a writer might be handed
	Secret string // what must not survive
}

// Corpus is the secrets every writer must mask; the tests of each writer
// (events, task errors, logs, HTTP error bodies) run it.
var Corpus = []Case{
	{"OpenAIKey", "401 Incorrect API key provided: sk-proj-AbCdEf1234567890XyZ_abcdef", "sk-proj-AbCdEf1234567890XyZ_abcdef"},
	{"OpenAILegacyKey", "using key sk-3d9f8a7b6c5e4d3c2b1a0f9e8d7c6b5a", "sk-3d9f8a7b6c5e4d3c2b1a0f9e8d7c6b5a"},
	{"BearerHeader", "request failed: Authorization: Bearer abcDEF123456ghiJKL789", "abcDEF123456ghiJKL789"},
	{"BasicHeader", "Authorization: Basic dXNlcjpzM2NyZXRwYXNz", "dXNlcjpzM2NyZXRwYXNz"},
	{"JWT", "token eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0.c2lnbmF0dXJlX2hlcmU was rejected", "eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoic2VydmljZV9yb2xlIn0.c2lnbmF0dXJlX2hlcmU"},
	{"PostgresURL", "dial postgres://agent:Sup3rS3cret!@db.internal:5432/app failed", "Sup3rS3cret!"},
	{"RedisURL", "redis://:r3d1sPa55@cache:6379/0 unreachable", "r3d1sPa55"},
	{"DSNKeyValue", "host=db user=app password=kv-Pa55word dbname=app", "kv-Pa55word"},
	{"JSONPassword", `{"user":"app","password":"json-Pa55word"}`, "json-Pa55word"},
	{"APIKeyParam", "GET /v1/models?api_key=qwertyuiop123456&limit=1", "qwertyuiop123456"},
	{"SecretEnv", "S3_SECRET_KEY=minio-secret-value-99", "minio-secret-value-99"},
	{"AWSAccessKey", "access key AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"},
	{"GitHubToken", "push with ghp_0123456789abcdefghijABCDEFGHIJ012345", "ghp_0123456789abcdefghijABCDEFGHIJ012345"},
	{"SlackToken", "xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"},
	{"GoogleKey", "key=AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890abcdefghijklmnopqrstu"},
	{"AccessToken", "refresh failed, access_token: at-9f8e7d6c5b4a", "at-9f8e7d6c5b4a"},
	{"PrivateKey", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretkeymaterial\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAsecretkeymaterial"},
}
