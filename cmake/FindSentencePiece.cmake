# FindSentencePiece: Google's SentencePiece (Debian: libsentencepiece-dev),
# the processor library and its trainer, as the imported target
# SentencePiece::SentencePiece. pkg-config's sentencepiece.pc, where present,
# gives the search hints. Installed beside relpos's package config, which
# finds it again for users of the static relpos::api.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_SentencePiece QUIET sentencepiece)
endif()

find_path(SentencePiece_INCLUDE_DIR sentencepiece_trainer.h
          HINTS ${PC_SentencePiece_INCLUDE_DIRS})
find_library(SentencePiece_LIBRARY sentencepiece
             HINTS ${PC_SentencePiece_LIBRARY_DIRS})
find_library(SentencePiece_TRAIN_LIBRARY sentencepiece_train
             HINTS ${PC_SentencePiece_LIBRARY_DIRS})
set(SentencePiece_VERSION ${PC_SentencePiece_VERSION})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY
                SentencePiece_INCLUDE_DIR
  VERSION_VAR SentencePiece_VERSION)

if(SentencePiece_FOUND AND NOT TARGET SentencePiece::SentencePiece)
  add_library(SentencePiece::SentencePiece INTERFACE IMPORTED)
  set_target_properties(SentencePiece::SentencePiece PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}"
    # The trainer library needs the processor library after it.
    INTERFACE_LINK_LIBRARIES
      "${SentencePiece_TRAIN_LIBRARY};${SentencePiece_LIBRARY}")
endif()
mark_as_advanced(SentencePiece_INCLUDE_DIR SentencePiece_LIBRARY
                 SentencePiece_TRAIN_LIBRARY)
