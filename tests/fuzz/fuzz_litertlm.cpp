// A .litertlm package: its header and FlatBuffer metadata, then everything a load or an
// inspection reads from its sections: TFLite models and their (external) buffers, the zlib
// tokenizer.json, the SentencePiece model, the LlmMetadata protobuf, the constant table the
// weight binder maps by name.
#include <cstdint>

#include "formats/litertlm.h"
#include "fuzz_support.h"
#include "spec/litert_map.h"
#include "tokenizer/tokenizer.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto package = formats::LitertlmFile::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.litertlm");
    for (const auto& s : package.sections) {
      fuzz::touch(package.section_bytes(s).data(), package.section_bytes(s).size());
      fuzz::expect_clean([&] {
        switch (s.type) {
          case formats::SectionType::TFLiteModel: {
            const auto model = package.tflite(s);
            for (const auto& sg : model.subgraphs)
              for (const auto& t : sg.tensors)
                fuzz::expect_clean([&] {
                  const auto bytes = t.external_buffer != 0 ? package.external_tensor_bytes(s, model, t)
                                                            : model.tensor_bytes(t);
                  fuzz::touch(bytes.data(), bytes.size());
                });
            break;
          }
          case formats::SectionType::HF_Tokenizer_Zlib:
            (void)tokenizer::parse_hf_tokenizer(package.hf_tokenizer_json(s), package.section_name(s));
            break;
          case formats::SectionType::SP_Tokenizer:
            (void)tokenizer::load_sentencepiece_bytes(package.sentencepiece_model(s), package.section_name(s));
            break;
          case formats::SectionType::LlmMetadataProto: (void)package.llm_metadata(s); break;
          default: break;
        }
      });
    }
    (void)formats::litertlm_to_text(package);
    (void)formats::litertlm_to_json(package).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // as `lumen inspect --json`
    const spec::PackageConstants constants = spec::collect_package_constants(package);
    for (const auto& c : constants.constants) fuzz::touch(c.bytes.data(), c.bytes.size());
    (void)spec::map_by_names(constants);
  });
  return 0;
}
