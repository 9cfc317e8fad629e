package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentworker/agentworker/tracing"
)

// Defaults applied by [New].
const (
	DefaultBaseURL    = "https://api.openai.com/v1"
	DefaultMaxRetries = 3
	DefaultTimeout    = 2 * time.Minute
	DefaultImageModel = "gpt-image-1"
	// DefaultMaxIdleConns covers a worker's default concurrency.
	DefaultMaxIdleConns = 256
)

// placeholderAPIKey is sent when Config.APIKey is empty: local
// OpenAI-compatible endpoints ignore the key, but an Authorization header
// is still expected by some of them.
const placeholderAPIKey = "unused"

// Config configures a [Client].
type Config struct {
	// BaseURL is the OpenAI-compatible endpoint, up to and including the
	// version segment, e.g. "http://localhost:11434/v1".
	// Defaults to "https://api.openai.com/v1".
	BaseURL string
	// APIKey is sent as a bearer token. It may be empty for local endpoints,
	// in which case a placeholder is sent. It never appears in errors.
	APIKey string
	// Model is the model name sent with every request. Required.
	Model string
	// ImageModel is the model [Client.GenerateImage] asks for pictures.
	// Defaults to "gpt-image-1".
	ImageModel string
	// MaxRetries is how many times a call is retried after a rate limit
	// (429), timeout (408), conflict (409), server error (5xx) or dropped
	// connection; Retry-After is honoured. A negative value disables retries.
	// Defaults to 3.
	MaxRetries int
	// Timeout bounds each HTTP attempt, including reading a streamed answer.
	// Defaults to 2 minutes.
	Timeout time.Duration
	// HTTPClient sends the requests. Defaults to a client of its own that
	// keeps up to MaxIdleConns connections to the endpoint open between
	// calls (http.DefaultClient keeps two: with more calls at once, every
	// other call would open a new connection, and a TLS handshake).
	HTTPClient *http.Client
	// MaxIdleConns is how many idle connections to the endpoint the default
	// HTTPClient keeps: as many as calls run at once. Defaults to
	// DefaultMaxIdleConns.
	MaxIdleConns int
	// Logger receives warnings, such as the tool_choice fallback.
	// Defaults to a logger that discards everything.
	Logger *slog.Logger
	// RateLimit paces the calls to what the provider allows. A refusal
	// (429, or 503 with Retry-After) is waited out and tried again, outside
	// MaxRetries, for up to RateLimit.MaxWait.
	RateLimit RateLimitConfig
}

// Client calls the Chat Completions API. It is safe for concurrent use.
type Client struct {
	// api posts the chat bodies the client builds (body) as they are:
	// openai-go's chat service would encode its params struct first, an
	// empty one, whose by-value frames grew a fresh goroutine's stack on
	// every call.
	api        openai.Client
	images     openai.ImageService
	model      string
	imageModel string
	apiKey     string
	timeout    time.Duration
	logger     *slog.Logger
	endpoint   string
	host       string // server.address of the chat spans
	rateLimit  RateLimitConfig
	pacersMu   sync.Mutex
	pacers     map[string]*pacer // by model
	// requiredUnsupported is set once the endpoint has rejected tool_choice
	// "required"; later calls send "auto" instead.
	requiredUnsupported atomic.Bool
	// paramFieldsKept is paramFields' encodings by paramKey.
	paramsMu        sync.Mutex
	paramFieldsKept map[paramKey][]byte
}

// New returns a client for cfg after applying its defaults. It fails when
// cfg.Model is empty or cfg.BaseURL is not a valid URL.
func New(cfg Config) (*Client, error) {
	if cfg.Model == "" {
		return nil, errors.New("new llm client: model is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.ImageModel == "" {
		cfg.ImageModel = DefaultImageModel
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = DefaultMaxIdleConns
	}
	if cfg.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost = cfg.MaxIdleConns, cfg.MaxIdleConns
		cfg.HTTPClient = &http.Client{Transport: t}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	apiKey := cfg.APIKey
	if apiKey == "" {
		apiKey = placeholderAPIKey
	}

	if cfg.RateLimit.MaxWait <= 0 {
		cfg.RateLimit.MaxWait = DefaultRateLimitMaxWait
	}

	// openai-go defers base URL errors to the first request; check now.
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new llm client: base url %q is not an absolute http(s) url", cfg.BaseURL)
	}

	c := &Client{
		model:      cfg.Model,
		imageModel: cfg.ImageModel,
		apiKey:     cfg.APIKey,
		timeout:    cfg.Timeout,
		logger:     cfg.Logger,
		// The limit is the provider's, per host and API path; the
		// credentials in a URL are not part of its name.
		endpoint:  u.Host + strings.TrimSuffix(u.Path, "/"),
		host:      u.Hostname(),
		rateLimit: cfg.RateLimit,
		pacers:    map[string]*pacer{},
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(apiKey),
		option.WithMaxRetries(cfg.MaxRetries),
		option.WithRequestTimeout(cfg.Timeout),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMiddleware(c.watchLimits),
	}
	// The services, unlike openai.NewClient, do not read OPENAI_*
	// environment variables: cfg is the only source of settings.
	c.api = openai.Client{Options: opts}
	c.images = openai.NewImageService(opts...)
	return c, nil
}

// pacer returns the pacer of model at the client's endpoint.
func (c *Client) pacer(model string) *pacer {
	c.pacersMu.Lock()
	defer c.pacersMu.Unlock()
	p := c.pacers[model]
	if p == nil {
		p = newPacer(PaceKey{Endpoint: c.endpoint, Model: model}, c.rateLimit, c.logger)
		c.pacers[model] = p
	}
	return p
}

// watchLimits is the HTTP middleware that reads every answer's rate-limit
// headers into the call's pacer, and keeps openai-go from retrying a
// refusal on its own: the call waits it out (paced calls) instead.
func (c *Client) watchLimits(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	cs, _ := req.Context().Value(callKey{}).(*callState)
	if err != nil || res == nil || cs == nil {
		return res, err
	}
	if refusal(res.StatusCode, res.Header) && !quotaExhausted(res) {
		cs.refused, cs.refusals = true, cs.refusals+1
		wait, named := retryAfter(res.Header, time.Now())
		if !named {
			wait = refusalBackoff(cs.refusals)
		}
		cs.retryAfter = wait
		cs.pacer.refused(res.Header, wait, cs.departed)
		res.Header.Set("x-should-retry", "false")
	} else if res.StatusCode < http.StatusBadRequest {
		cs.pacer.answered(res.Header, cs.departed)
	}
	return res, err
}

// quotaExhausted reports whether a 429 says the account is out of
// credit (OpenAI's insufficient_quota): no wait ends that. The error body
// is read and put back for openai-go.
func quotaExhausted(res *http.Response) bool {
	if res.StatusCode != http.StatusTooManyRequests || res.Body == nil {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	if bytes.Contains(body, []byte(codeInsufficientQuota)) {
		res.Header.Set("x-should-retry", "false")
		return true
	}
	return false
}

// codeInsufficientQuota is the error code of a 429 that no wait ends.
const codeInsufficientQuota = "insufficient_quota"

// paced makes one call of model through its pacer: it waits for the pace,
// and when the provider refuses the call, waits as asked and tries again,
// until the call has waited RateLimit.MaxWait in all. It returns how long
// the call waited for the rate limit.
func (c *Client) paced(ctx context.Context, model string, tokens float64, onWait func(time.Duration), call func(context.Context) error) (time.Duration, error) {
	cs := &callState{pacer: c.pacer(model), tokens: tokens, maxWait: c.rateLimit.MaxWait, onWait: onWait}
	ctx = withCall(ctx, cs)
	for {
		if err := cs.pacer.acquire(ctx, cs); err != nil {
			if errors.Is(err, errWaitTooLong) {
				return cs.waited, cs.rateLimitError()
			}
			return cs.waited, err
		}
		cs.refused = false
		err := call(ctx)
		if err == nil || !cs.refused || ctx.Err() != nil {
			return cs.waited, err
		}
		cs.lastErr = err
		if err := cs.sleep(ctx, cs.retryAfter); err != nil {
			return cs.waited, err
		}
	}
}

// GenerateImage asks the Images API (POST /images/generations) for one
// PNG picture of prompt and returns its bytes. size is "1024x1024",
// "1536x1024", "1024x1536", "auto" or, for the model's default, "". The
// picture comes back inline as base64 (b64_json), never as a URL. Errors
// the endpoint answered with are [*APIError], retried like Complete's; an
// answer without picture data is [ErrNoImage].
func (c *Client) GenerateImage(ctx context.Context, prompt, size string) ([]byte, error) {
	params := openai.ImageGenerateParams{Prompt: prompt, Model: openai.ImageModel(c.imageModel), N: openai.Int(1)}
	if size != "" {
		params.Size = openai.ImageGenerateParamsSize(size)
	}
	if strings.HasPrefix(c.imageModel, "dall-e") {
		// DALL·E answers with a URL unless asked; GPT image models always
		// answer inline and refuse response_format.
		params.ResponseFormat = openai.ImageGenerateParamsResponseFormatB64JSON
	} else {
		params.OutputFormat = openai.ImageGenerateParamsOutputFormatPNG
	}
	var resp *openai.ImagesResponse
	_, err := c.paced(ctx, c.imageModel, 0, nil, func(ctx context.Context) (err error) {
		if resp, err = c.images.Generate(ctx, params); err != nil {
			return c.convertError(ctx, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("generate image with model %q: %w", c.imageModel, err)
	}
	if len(resp.Data) == 0 || resp.Data[0].B64JSON == "" {
		return nil, fmt.Errorf("generate image with model %q: %w", c.imageModel, ErrNoImage)
	}
	data, err := base64.StdEncoding.DecodeString(resp.Data[0].B64JSON)
	if err != nil {
		return nil, fmt.Errorf("generate image with model %q: decode b64_json: %w", c.imageModel, err)
	}
	return data, nil
}

// Model returns the model name the client sends.
func (c *Client) Model() string { return c.model }

// modelOf is the model req calls: its own, else the client's.
func (c *Client) modelOf(req Request) string { return cmp.Or(req.Model, c.model) }

// Complete sends req and returns the assistant's answer.
//
// The call streams when req.OnDelta is set; either way the Response holds the
// whole content, the assembled tool calls and the usage. req.ToolChoice is
// sent only when req.Tools is not empty. Errors the endpoint answered with
// are [*APIError]; see [IsTransient].
func (c *Client) Complete(ctx context.Context, req Request) (Response, error) {
	choice := req.ToolChoice
	if len(req.Tools) == 0 {
		choice = "" // endpoints reject tool_choice without tools
	}
	fallback := false
	if choice == ToolChoiceRequired && c.requiredUnsupported.Load() {
		choice, fallback = ToolChoiceAuto, true
	}

	resp, err := c.complete(ctx, req, choice)
	if status, rejected := rejectedStatus(err); rejected && choice == ToolChoiceRequired {
		c.logger.WarnContext(ctx, "endpoint rejected tool_choice required, repeating the call with auto",
			slog.String("model", c.modelOf(req)), slog.Int("status", status))
		choice, fallback = ToolChoiceAuto, true
		waited := resp.RateLimitWait
		resp, err = c.complete(ctx, req, choice)
		resp.RateLimitWait += waited
		// A second rejection means the request itself is at fault, not
		// tool_choice: only remember the fallback when "auto" was accepted.
		if _, rejectedAgain := rejectedStatus(err); !rejectedAgain {
			c.requiredUnsupported.Store(true)
		}
	}
	if err != nil {
		// What the call waited is spent, failed or not.
		failed := Response{RateLimitWait: resp.RateLimitWait}
		if choice != "" {
			return failed, fmt.Errorf("complete with model %q and tool_choice %q: %w", c.modelOf(req), choice, err)
		}
		return failed, fmt.Errorf("complete with model %q: %w", c.modelOf(req), err)
	}
	resp.ToolChoiceFallback = fallback
	return resp, nil
}

// rejectedStatus reports whether the endpoint refused the request as invalid
// (400 or 422), and with which status.
func rejectedStatus(err error) (int, bool) {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		return 0, false
	}
	switch apiErr.StatusCode {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return apiErr.StatusCode, true
	}
	return 0, false
}

// complete makes one call, with openai-go's retries, using choice as the
// tool choice.
func (c *Client) complete(ctx context.Context, req Request, choice ToolChoice) (Response, error) {
	body, err := c.body(req, choice, req.OnDelta != nil)
	if err != nil {
		return Response{}, err
	}
	// Four bytes a token; the answer's usage corrects the estimate.
	tokens := float64(len(body)) / 4
	var resp Response
	model := c.modelOf(req)
	// The chat span holds the call's rate-limit waits and its retries.
	ctx, span := tracing.StartChat(ctx, model, c.host)
	waited, err := c.paced(ctx, model, tokens, req.OnRateLimitWait, func(ctx context.Context) (err error) {
		if req.OnDelta == nil {
			var completion *openai.ChatCompletion
			if err := c.api.Post(ctx, chatPath, body, &completion); err != nil {
				return c.convertError(ctx, err)
			}
			resp, err = c.response(completion)
			return err
		}
		resp, err = c.stream(ctx, body, req.OnDelta)
		return err
	})
	if err != nil {
		span.End(tracing.ChatResult{}, err)
		return Response{RateLimitWait: waited}, err
	}
	c.pacer(model).charge(tokens, float64(resp.Usage.TotalTokens))
	if resp.Model == "" {
		resp.Model = model
	}
	span.End(tracing.ChatResult{ResponseModel: resp.Model, InputTokens: resp.Usage.PromptTokens,
		OutputTokens: resp.Usage.CompletionTokens, FinishReason: resp.FinishReason}, nil)
	resp.RateLimitWait = waited
	return resp, nil
}

// stream makes one streamed call, reporting content fragments to onDelta.
func (c *Client) stream(ctx context.Context, body []byte, onDelta func(string)) (Response, error) {
	stream := c.newStream(ctx, body)
	defer stream.Close()

	var fold streamFold
	for stream.Next() {
		chunk := stream.Current()
		if err := fold.add(&chunk); err != nil {
			return Response{}, err
		}
		for i := range chunk.Choices {
			if chunk.Choices[i].Index == 0 && chunk.Choices[i].Delta.Content != "" {
				onDelta(chunk.Choices[i].Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return Response{}, c.convertError(ctx, err)
	}
	return fold.response()
}

// body is a call's request body: {"messages":…} (encodeMessages), the
// fields openai-go encodes of the call's parameters (paramFields), the
// tools as encoded (Tool.Encode, or now for a tool without its wire form)
// and "stream" when streamed, in the order openai-go writes them. Built
// by appending: setting the tools and "stream" into the body with a JSON
// editor scanned the whole conversation twice a call.
func (c *Client) body(req Request, choice ToolChoice, stream bool) ([]byte, error) {
	messages, err := encodeMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	fields, err := c.paramFields(req, choice, stream)
	if err != nil {
		return nil, err
	}
	tools := make([][]byte, len(req.Tools))
	size := len(messages) + len(fields) + 48
	for i, t := range req.Tools {
		if tools[i] = t.wire; tools[i] == nil {
			if tools[i], err = t.wireForm(); err != nil {
				return nil, err
			}
		}
		size += len(tools[i]) + 1
	}
	body := append(make([]byte, 0, size), `{"messages":`...)
	body = append(body, messages...)
	if len(fields) > 0 {
		body = append(append(body, ','), fields...)
	}
	if len(tools) > 0 {
		body = append(body, `,"tools":[`...)
		for i, wire := range tools {
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, wire...)
		}
		body = append(body, ']')
	}
	if stream {
		body = append(body, `,"stream":true`...)
	}
	return append(body, '}'), nil
}

// paramKey is what a call's parameters besides its messages and tools
// depend on, for a call without a response schema.
type paramKey struct {
	model  string
	choice ToolChoice // "" without tools
	stream bool
}

// maxParamFields bounds the encoded parameters kept: a task names its
// model, so the keys are the tasks' to choose.
const maxParamFields = 64

// paramFields is the fields openai-go encodes of the call's parameters
// (params), without their braces. They are the same for every call of a
// model and tool choice, so they are kept (up to maxParamFields).
func (c *Client) paramFields(req Request, choice ToolChoice, stream bool) ([]byte, error) {
	key := paramKey{model: c.modelOf(req), stream: stream}
	if len(req.Tools) > 0 {
		key.choice = choice
	}
	keep := req.ResponseSchema == nil
	if keep {
		c.paramsMu.Lock()
		fields, ok := c.paramFieldsKept[key]
		c.paramsMu.Unlock()
		if ok {
			return fields, nil
		}
	}
	params := c.params(req, choice)
	if stream {
		params.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	rest, err := params.MarshalJSON()
	if rest = bytes.TrimSpace(rest); err == nil && (len(rest) < 2 || rest[0] != '{' || rest[len(rest)-1] != '}') {
		err = fmt.Errorf("not an object: %.40s", rest)
	}
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	fields := bytes.TrimSpace(rest[1 : len(rest)-1])
	if keep {
		c.paramsMu.Lock()
		if c.paramFieldsKept == nil {
			c.paramFieldsKept = map[paramKey][]byte{}
		}
		if len(c.paramFieldsKept) < maxParamFields {
			c.paramFieldsKept[key] = fields
		}
		c.paramsMu.Unlock()
	}
	return fields, nil
}

// functionTool is t as openai-go's request parameter.
func functionTool(t Tool) openai.ChatCompletionToolUnionParam {
	def := shared.FunctionDefinitionParam{
		Name:       t.Name,
		Parameters: shared.FunctionParameters(t.Parameters),
	}
	if t.Description != "" {
		def.Description = openai.String(t.Description)
	}
	return openai.ChatCompletionFunctionTool(def)
}

// Encode returns t with its wire form made now: a request offering the
// returned Tool sends those bytes instead of encoding the schema again,
// which for a tool offered on every call is most of the request's encoding.
// t.Parameters must not change afterwards.
func (t Tool) Encode() (Tool, error) {
	b, err := t.wireForm()
	if err != nil {
		return t, err
	}
	t.wire = b
	return t, nil
}

// wireForm is t as a request sends it.
func (t Tool) wireForm() ([]byte, error) {
	b, err := functionTool(t).MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode tool %q: %w", t.Name, err)
	}
	return b, nil
}

// params converts req to openai-go request parameters, all but its tools
// (body adds them).
func (c *Client) params(req Request, choice ToolChoice) openai.ChatCompletionNewParams {
	// The messages are encoded apart (encodeMessages) and set in body.
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(c.modelOf(req))}
	if rs := req.ResponseSchema; rs != nil {
		params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: rs.Name, Schema: rs.Schema, Strict: openai.Bool(rs.Strict)},
		}}
	}
	if len(req.Tools) > 0 && choice != "" {
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(string(choice))}
	}
	return params
}

// response converts the first choice of a completion to a Response.
func (c *Client) response(completion *openai.ChatCompletion) (Response, error) {
	if len(completion.Choices) == 0 {
		return Response{}, fmt.Errorf("read completion %q: %w", completion.ID, ErrNoChoices)
	}
	choice := completion.Choices[0]
	msg := Message{Role: RoleAssistant, Content: choice.Message.Content}
	for _, tc := range choice.Message.ToolCalls {
		msg.ToolCalls = appendToolCall(msg.ToolCalls, tc.Type, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	model := completion.Model // empty: the model asked for (complete fills it in)
	return Response{
		Message:      msg,
		FinishReason: choice.FinishReason,
		Usage: Usage{
			PromptTokens:     completion.Usage.PromptTokens,
			CompletionTokens: completion.Usage.CompletionTokens,
			TotalTokens:      completion.Usage.TotalTokens,
		},
		Model: model,
	}, nil
}

// appendToolCall appends a tool call of the answer, of type typ, unless
// it is a kind of tool never offered: only function tools are.
func appendToolCall(calls []ToolCall, typ string, call ToolCall) []ToolCall {
	if typ == "custom" {
		return calls
	}
	return append(calls, call)
}

// convertError turns an openai-go error into an *APIError when the endpoint
// answered with one, and keeps the caller's cancellation visible to
// errors.Is.
func (c *Client) convertError(ctx context.Context, err error) error {
	var sdkErr *openai.Error
	if errors.As(err, &sdkErr) {
		return &APIError{
			StatusCode: sdkErr.StatusCode,
			Type:       redact(sdkErr.Type, c.apiKey),
			Code:       redact(sdkErr.Code, c.apiKey),
			Message:    redact(sdkErr.Message, c.apiKey),
			Transient:  transientStatus(sdkErr.StatusCode) && sdkErr.Code != codeInsufficientQuota,
		}
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return c.streamError(streamErr)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w: %w", ctxErr, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the timeout of %s: %w", c.timeout, err)
	}
	return err
}

// streamError converts an error event received in the middle of a stream.
func (c *Client) streamError(streamErr *ssestream.StreamError) *APIError {
	var event struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	apiErr := &APIError{Transient: true}
	if err := json.Unmarshal(streamErr.Event.Data, &event); err != nil {
		apiErr.Message = "undecodable error event"
		return apiErr
	}
	apiErr.Type = redact(event.Error.Type, c.apiKey)
	apiErr.Message = redact(event.Error.Message, c.apiKey)
	if event.Error.Code != nil {
		apiErr.Code = redact(fmt.Sprint(event.Error.Code), c.apiKey)
	}
	return apiErr
}
