#include "lattice/engine/tokenizer/chat_template.h"

#include <utility>

#include "lattice/core/log.h"

namespace lattice::engine {
namespace {

constexpr std::pair<std::string_view, ChatFormat> kNames[] = {
    {"chatml", ChatFormat::kChatML},
    {"llama3", ChatFormat::kLlama3},
    {"llama2", ChatFormat::kLlama2},
    {"llama2-sys", ChatFormat::kLlama2Sys},
    {"llama2-sys-bos", ChatFormat::kLlama2SysBos},
    {"llama2-sys-strip", ChatFormat::kLlama2SysStrip},
    {"mistral-v1", ChatFormat::kMistralV1},
    {"mistral-v3", ChatFormat::kMistralV3},
    {"mistral-v3-tekken", ChatFormat::kMistralV3Tekken},
    {"mistral-v7", ChatFormat::kMistralV7},
    {"gemma", ChatFormat::kGemma},
    {"phi3", ChatFormat::kPhi3},
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string_view chat_format_name(ChatFormat format) {
  for (const auto& [name, f] : kNames) {
    if (f == format) return name;
  }
  return "unknown";
}

ChatFormat detect_chat_format(std::string_view t) {
  for (const auto& [name, f] : kNames) {
    if (name == t) return f;
  }
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|im_start|>")) return ChatFormat::kChatML;
  if (t.substr(0, 7) == "mistral" || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return ChatFormat::kMistralV7;
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return ChatFormat::kMistralV1;
      if (has("\"[INST]\"")) return ChatFormat::kMistralV3Tekken;
      return ChatFormat::kMistralV3;
    }
    if (has("content.strip()")) return ChatFormat::kLlama2SysStrip;
    if (has("bos_token + '[INST]")) return ChatFormat::kLlama2SysBos;
    if (has("<<SYS>>")) return ChatFormat::kLlama2Sys;
    return ChatFormat::kLlama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) return ChatFormat::kPhi3;
  if (has("<start_of_turn>")) return ChatFormat::kGemma;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatFormat::kLlama3;
  return ChatFormat::kUnknown;
}

Result<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  std::string out;
  switch (format) {
    case ChatFormat::kUnknown:
      return InvalidArgument("render_chat: unknown chat format");

    case ChatFormat::kChatML:
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;

    case ChatFormat::kLlama3:
      for (const auto& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;

    case ChatFormat::kLlama2:
    case ChatFormat::kLlama2Sys:
    case ChatFormat::kLlama2SysBos:
    case ChatFormat::kLlama2SysStrip: {
      // The format has no generation prompt: the open [INST] ... [/INST] is one.
      const bool system_block = format != ChatFormat::kLlama2;
      const bool bos_in_history = format == ChatFormat::kLlama2SysBos;
      const bool strip = format == ChatFormat::kLlama2SysStrip;
      bool in_turn = true;  // the first [INST] is written up front (BOS comes from the tokenizer)
      out += "[INST] ";
      for (const auto& m : messages) {
        const std::string content = strip ? trim(m.content) : m.content;
        if (!in_turn) {
          in_turn = true;
          out += bos_in_history ? "<s>[INST] " : "[INST] ";
        }
        if (m.role == "system") {
          out += system_block ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
        } else if (m.role == "user") {
          out += content + " [/INST]";
        } else {
          out += content + "</s>";
          in_turn = false;
        }
      }
      break;
    }

    case ChatFormat::kMistralV1:
    case ChatFormat::kMistralV3:
    case ChatFormat::kMistralV3Tekken: {
      const std::string lead = format == ChatFormat::kMistralV1 ? " " : "";
      const std::string trail = format == ChatFormat::kMistralV3Tekken ? "" : " ";
      const bool trim_assistant = format == ChatFormat::kMistralV3;
      bool in_turn = false;
      for (const auto& m : messages) {
        if (!in_turn) {
          out += lead + "[INST]" + trail;
          in_turn = true;
        }
        if (m.role == "system") {
          out += m.content + "\n\n";
        } else if (m.role == "user") {
          out += m.content + lead + "[/INST]";
        } else {
          out += trail + (trim_assistant ? trim(m.content) : m.content) + "</s>";
          in_turn = false;
        }
      }
      break;
    }

    case ChatFormat::kMistralV7:
      for (const auto& m : messages) {
        if (m.role == "system") out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "user") out += "[INST] " + m.content + "[/INST]";
        else out += " " + m.content + "</s>";
      }
      break;

    case ChatFormat::kGemma: {
      // No system role: the system text is prepended to the next user turn.
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
          out += system + "\n\n";
          system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }

    case ChatFormat::kPhi3:
      for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
  }
  return out;
}

std::string apply_chat_template(std::string_view name_or_template, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, bool* fell_back) {
  ChatFormat f = detect_chat_format(name_or_template);
  if (fell_back) *fell_back = f == ChatFormat::kUnknown;
  if (f == ChatFormat::kUnknown) {
    LATTICE_LOG_WARN("chat template not recognised ({} bytes); using ChatML", name_or_template.size());
    f = ChatFormat::kChatML;
  }
  return std::move(render_chat(f, messages, add_generation_prompt)).value();
}

}  // namespace lattice::engine
