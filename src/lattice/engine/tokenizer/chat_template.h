// Chat templates without Jinja: the formats in common use are recognised from the
// template source (tokenizer.chat_template) or given by name, and rendered by hand, as
// llama.cpp's llama_chat_apply_template does. The text produced is what the model was
// trained on, minus the BOS token (the tokenizer adds it); encode it with parse_special.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::engine {

enum class ChatFormat {
  kUnknown,
  kChatML,          // <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes)
  kLlama3,          // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kLlama2,          // [INST] ... [/INST] ...</s>, system folded into the first user turn
  kLlama2Sys,       // ... with <<SYS>>\n...\n<</SYS>>\n\n
  kLlama2SysBos,    // ... and <s> before every later [INST]
  kLlama2SysStrip,  // ... and message contents trimmed
  kMistralV1,       // " [INST] user [/INST] assistant</s>"
  kMistralV3,       // "[INST] user[/INST] assistant</s>" (assistant trimmed)
  kMistralV3Tekken, // "[INST]user[/INST]assistant</s>"
  kMistralV7,       // [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] ...</s>
  kGemma,           // <start_of_turn>user\n...<end_of_turn>\n, assistant is "model"
  kPhi3,            // <|user|>\n...<|end|>\n
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others are passed through)
  std::string content;
};

// A format name ("chatml", "llama3", "llama2", "llama2-sys", "mistral-v1", "gemma", ...)
// or a template's source, recognised by its marker strings. kUnknown if neither.
ChatFormat detect_chat_format(std::string_view name_or_template);
std::string_view chat_format_name(ChatFormat format);

// Renders the conversation; add_generation_prompt opens the assistant's turn where the
// format has one. kUnknown -> kInvalidArgument.
Result<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

// detect + render; an unrecognised template falls back to ChatML with a warning in the log
// (and *fell_back set when given).
std::string apply_chat_template(std::string_view name_or_template, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, bool* fell_back = nullptr);

}  // namespace lattice::engine
